// `npm run bench -- --scale [--sizes 100,500,1000] [--duration S] [--out DIR]`:
// runs the scale benchmark, prints its table, writes DIR/scale/scale.json.
import { join, relative } from "node:path";
import { parseArgs } from "node:util";
import { projectRoot } from "../../host/paths.js";
import { consoleTable, markdownTable } from "../report/table.js";
import { writeJson } from "../report/outputs.js";
import { DEFAULT_SIZES, runScale } from "./index.js";
import { scaleTable, scaleTitle } from "./report.js";

const USAGE = `usage: npm run bench -- --scale [options]
  --sizes A,B,...  fleet sizes (default ${DEFAULT_SIZES.join(",")})
  --duration S     seconds measured per size (default 10, after a 4 s warm-up)
  --out DIR        results folder (default bench/results); writes DIR/scale/scale.json`;

/** Runs the command; returns the exit code. */
export async function runScaleCommand(argv: string[]): Promise<number> {
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      options: { scale: { type: "boolean" }, sizes: { type: "string" }, duration: { type: "string" }, out: { type: "string" }, help: { type: "boolean" } },
      strict: true,
    }));
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n${USAGE}\n`);
    return 2;
  }
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  const sizes = values.sizes?.split(",").map(Number) ?? DEFAULT_SIZES;
  const measureS = values.duration === undefined ? undefined : Number(values.duration);
  if (sizes.some((n) => !Number.isInteger(n) || n < 1) || (measureS !== undefined && !(measureS > 0))) {
    process.stderr.write(`--sizes takes integers >= 1, --duration seconds > 0\n${USAGE}\n`);
    return 2;
  }
  const report = await runScale({ sizes, measureS, onProgress: (line) => process.stderr.write(`[scale] ${line}\n`) });
  const dir = join(values.out ?? join(projectRoot, "bench", "results"), "scale");
  writeJson(join(dir, "scale.json"), report);
  const table = scaleTable(report);
  process.stdout.write(`\n${scaleTitle(report)}\n${consoleTable(table)}\n\n${markdownTable(table)}\nresults: ${relative(process.cwd(), dir) || "."}/scale.json\n`);
  return 0;
}
