#!/usr/bin/env node
// `npm run bench -- ...` and `npm run soak -- ...`: build what is missing, then run the benchmark command.
import { ensureBuilt, root } from "./ensure-built.mjs";

ensureBuilt();
const { runBench } = await import(new URL("dist/bench/command.js", `file://${root}/`).href);
process.exitCode = await runBench(process.argv.slice(2));
