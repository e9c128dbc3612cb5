// `npm run bench -- --scale`: runs the scale benchmark, prints its table,
// writes DIR/scale/scale.json.
import { join, relative } from "node:path";
import { consoleTable, markdownTable } from "../report/table.js";
import { writeJson } from "../report/outputs.js";
import { runScale } from "./index.js";
import { scaleTable, scaleTitle } from "./report.js";

export interface ScaleCommand {
  sizes?: number[];
  /** Seconds measured per size. */
  measureS?: number;
  outDir: string;
}

export async function runScaleCommand(opts: ScaleCommand, out: (text: string) => void, err: (text: string) => void): Promise<void> {
  const report = await runScale({ sizes: opts.sizes, measureS: opts.measureS, onProgress: (line) => err(`[scale] ${line}\n`) });
  const dir = join(opts.outDir, "scale");
  writeJson(join(dir, "scale.json"), report);
  const table = scaleTable(report);
  out(`\n${scaleTitle(report)}\n${consoleTable(table)}\n\n${markdownTable(table)}\nresults: ${relative(process.cwd(), dir) || "."}/scale.json\n`);
}
