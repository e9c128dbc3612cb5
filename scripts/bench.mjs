#!/usr/bin/env node
// `npm run bench -- ...` and `npm run soak -- ...`: build what is missing, then run the benchmark CLI.
import { ensureBuilt, root } from "./ensure-built.mjs";

ensureBuilt();
await import(new URL("dist/bench/cli.js", `file://${root}/`).href);
