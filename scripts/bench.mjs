#!/usr/bin/env node
// `npm run bench -- ...`: build what is missing, then run the benchmark CLI.
import { ensureBuilt, root } from "./ensure-built.mjs";

ensureBuilt();
await import(new URL("dist/bench/cli.js", `file://${root}/`).href);
