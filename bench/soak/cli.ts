// Entry point of `npm run soak` (scripts/soak.mjs imports the compiled file).
// Exit 0: the run passed; 1: it failed (the reasons are printed and written
// to the summary) or could not run; 2: bad arguments.
import { writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { parseArgs } from "node:util";
import { projectRoot } from "../../host/paths.js";
import { soakChart } from "./charts.js";
import { runSoak, verdict } from "./index.js";
import { soakMarkdown } from "./report.js";

const USAGE = `usage: npm run soak -- [--minutes N] [--out DIR] [--rate R] [--seed S]
  --minutes N   whole minutes of traffic, one cycle of faults each (default 1); runs of 10 or more also fail
                when memory does not level off
  --out DIR     results folder (default bench/results/soak-<UTC time>/)
  --rate R      requests per second (default 30)
  --seed S      the traffic's seed (default 1)`;

const CHART_FILE = "soak.svg";
/** Start-up, the drain and the last events fit well within this beyond the run itself. */
const OVERRUN_MS = 180_000;

function positive(value: string | undefined, flag: string, fallback: number): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!(Number.isFinite(n) && n > 0)) throw new Error(`${flag}: expected a number > 0, got ${JSON.stringify(value)}`);
  return n;
}

async function main(): Promise<number> {
  let minutes: number, rate: number, seed: number, outDir: string;
  try {
    const { values } = parseArgs({
      options: {
        minutes: { type: "string" }, out: { type: "string" }, rate: { type: "string" }, seed: { type: "string" }, help: { type: "boolean" },
      },
    });
    if (values.help) {
      console.log(USAGE);
      return 0;
    }
    minutes = positive(values.minutes, "--minutes", 1);
    // The schedule runs whole one-minute cycles.
    if (!Number.isInteger(minutes)) throw new Error(`--minutes: expected a whole number of minutes, got ${values.minutes}`);
    rate = positive(values.rate, "--rate", 30);
    seed = positive(values.seed, "--seed", 1);
    if (!Number.isInteger(seed)) throw new Error(`--seed: expected a whole number, got ${values.seed}`);
    const stamp = new Date().toISOString().replace(/[-:]/g, "").replace(/\.\d+Z$/, "Z");
    outDir = values.out ?? join(projectRoot, "bench", "results", `soak-${stamp}`);
  } catch (err) {
    console.error(`${(err as Error).message}\n${USAGE}`);
    return 2;
  }
  const command = `npm run soak -- --minutes ${minutes}${rate === 30 ? "" : ` --rate ${rate}`}${seed === 1 ? "" : ` --seed ${seed}`}`;
  // Bounded whatever happens: a run stuck past its time exits (Envoy and the children go with it).
  setTimeout(() => {
    console.error(`soak: still running ${OVERRUN_MS / 1000} s after its ${minutes} min; giving up`);
    process.exit(1);
  }, minutes * 60_000 + OVERRUN_MS).unref();

  const result = await runSoak({ durationMs: minutes * 60_000, ratePerS: rate, seed, outDir, progress: (line) => console.log(line) });
  const reasons = verdict(result);
  writeFileSync(join(outDir, "soak.json"), JSON.stringify({ command, verdict: reasons, ...result }, null, 2) + "\n");
  writeFileSync(join(outDir, CHART_FILE), await soakChart(result));
  writeFileSync(join(outDir, "summary.md"), soakMarkdown(result, reasons, command, CHART_FILE));
  console.log(`results in ${relative(process.cwd(), outDir) || "."}/ (summary.md, ${CHART_FILE}, soak.json, logs)`);
  if (reasons.length === 0) {
    console.log("soak passed");
    return 0;
  }
  console.error(`soak failed:\n${reasons.map((x) => `  - ${x}`).join("\n")}`);
  return 1;
}

process.exitCode = await main().catch((err: unknown) => {
  console.error(`soak: ${(err as Error).message ?? err}`);
  return 1;
});
