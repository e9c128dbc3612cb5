// Entry point of `npm run bench` and `npm run soak` (scripts/bench.mjs imports the compiled file).
import { runBench } from "./command.js";

process.exitCode = await runBench(process.argv.slice(2));
