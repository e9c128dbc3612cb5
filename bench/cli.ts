// Entry point of `npm run bench` (scripts/bench.mjs imports the compiled file).
import { runBench } from "./command.js";

const argv = process.argv.slice(2);
// The aggregator's scale benchmark has its own options (bench/scale/command.ts).
process.exitCode = argv.includes("--scale") ? await (await import("./scale/command.js")).runScaleCommand(argv) : await runBench(argv);
