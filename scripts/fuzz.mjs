#!/usr/bin/env node
// `npm run fuzz -- ...`: build what is missing, then run the fuzzer CLI.
// With ENVOY_BIN set, or no Envoy stage, Envoy is not installed into .venv.
import { ensureBuilt, root } from "./ensure-built.mjs";

const args = process.argv.slice(2);
const noEnvoyStage = args.includes("--case") || args.some((a, i) => (a === "--envoy" && args[i + 1] === "0") || a === "--envoy=0");
ensureBuilt({ envoy: !process.env.ENVOY_BIN && !noEnvoyStage });
await import(new URL("dist/fuzz/cli.js", `file://${root}/`).href);
