// `npm run bench -- --soak` (and `npm run soak`): runs the soak, writes its
// summary, chart and JSON, and says whether it passed. Exit 0: passed; 1:
// failed (the reasons are printed and written to the summary).
import { writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { soakChart } from "./charts.js";
import { runSoak, verdict } from "./index.js";
import { soakMarkdown } from "./report.js";

export const SOAK_DEFAULTS = { minutes: 1, ratePerS: 30, seed: 1 };
const CHART_FILE = "soak.svg";
/** Start-up, the drain and the last events fit well within this beyond the run itself. */
const OVERRUN_MS = 180_000;

export interface SoakCommand {
  minutes: number;
  ratePerS: number;
  seed: number;
  outDir: string;
}

export async function runSoakCommand(opts: SoakCommand, log: (line: string) => void, err: (line: string) => void): Promise<number> {
  const { minutes, ratePerS, seed, outDir } = opts;
  const command = `npm run soak -- --minutes ${minutes}${ratePerS === SOAK_DEFAULTS.ratePerS ? "" : ` --rate ${ratePerS}`}${seed === SOAK_DEFAULTS.seed ? "" : ` --seed ${seed}`}`;
  // Bounded whatever happens: a run stuck past its time exits (Envoy and the children go with it).
  setTimeout(() => {
    err(`soak: still running ${OVERRUN_MS / 1000} s after its ${minutes} min; giving up`);
    process.exit(1);
  }, minutes * 60_000 + OVERRUN_MS).unref();

  const result = await runSoak({ durationMs: minutes * 60_000, ratePerS, seed, outDir, progress: log });
  const reasons = verdict(result);
  writeFileSync(join(outDir, "soak.json"), JSON.stringify({ command, verdict: reasons, ...result }, null, 2) + "\n");
  writeFileSync(join(outDir, CHART_FILE), await soakChart(result));
  writeFileSync(join(outDir, "summary.md"), soakMarkdown(result, reasons, command, CHART_FILE));
  log(`results in ${relative(process.cwd(), outDir) || "."}/ (summary.md, ${CHART_FILE}, soak.json, logs)`);
  if (reasons.length === 0) {
    log("soak passed");
    return 0;
  }
  err(`soak failed:\n${reasons.map((x) => `  - ${x}`).join("\n")}`);
  return 1;
}
