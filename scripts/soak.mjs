#!/usr/bin/env node
// `npm run soak -- --minutes N`: build what is missing, then run the soak.
import { ensureBuilt, root } from "./ensure-built.mjs";

ensureBuilt();
await import(new URL("dist/bench/soak/cli.js", `file://${root}/`).href);
