#!/usr/bin/env node
// `npm start [-- --config FILE]`: build what is missing, then run the stack.
import { ensureBuilt, root } from "./ensure-built.mjs";

ensureBuilt();
await import(new URL("dist/testing/launcher/start.js", `file://${root}/`).href);
