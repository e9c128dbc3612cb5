// A scenario's generated block of BENCHMARKS.md, kept compact: one line
// naming the run and its command, the charts, the tables; and the live runs'
// rows of the one table they share. How to read the tables is said once, at
// the top of BENCHMARKS.md and in docs/benchmarks.md, not in every block.
import { summariseSeeds } from "../seeds.js";
import type { ScenarioResult } from "../types.js";
import { admissionTable, NO_ADMISSION, showsAdmission } from "./admission-table.js";
import type { ChartPaths } from "./outputs.js";
import type { RowsBlock } from "./rows-block.js";
import { hasClasses, resultsTable, sloByClassTable, sloClasses } from "./results-table.js";
import { markdownTable, type Table } from "./table.js";

// The bench's commands import the block writers from here.
export { replaceBlock } from "./block.js";
export { withScenarioRows } from "./rows-block.js";

/** `scenario:NAME`: a simulated scenario's own block. */
export const scenarioKey = (r: Pick<ScenarioResult, "scenario">) => `scenario:${r.scenario}`;

/** Ours with admission against without, one row per scenario. */
export const ON_OFF_BLOCK: RowsBlock = {
  key: "admission:on-off",
  heading: "### Admission on and off",
  intro:
    "Ours (the `latency` profile) with admission against without, every scenario: the 429s each gave, and the change of each TTFT percentile and of req/s with admission on; " +
    "each seed's value, seed 1 / 2 / 3 (one value where they agree). Where nothing overloads, the target is no 429 and no percentile moved by more than 1%.",
};

/** The live runs' table: on the fake fleet (`live`), or on real servers (`live-llamacpp`). */
export function liveBlock(r: Pick<ScenarioResult, "pods">): RowsBlock {
  return r.pods
    ? { key: `live-${r.pods}`, heading: `### Live, real ${r.pods} pods`, intro: `**Live, real ${r.pods} pods**: a row per policy; \`offered\`: requests per seed, seconds of arrivals.` }
    : {
        key: "live",
        heading: "### Live runs",
        intro:
          "**Live**: real Envoy and the fake fleet, a scenario's first seconds of arrivals (its fleet and traffic are in its section above); " +
          "a row per policy; `offered`: requests per seed, seconds of arrivals. `TTFT ≤ N s` is n/a in rows run before those columns existed.",
      };
}

/** The live runs' admission tables, one over every scenario that refused a request. */
export function liveAdmissionBlock(r: Pick<ScenarioResult, "pods">): RowsBlock {
  const live = liveBlock(r);
  return { key: `${live.key}:admission`, heading: "", intro: "Admission in the live runs, each seed's value:" };
}

/** `t` behind the scenario's name on every row, and on its first what was offered and the charts. */
function scenarioRows(t: Table, runs: readonly ScenarioResult[], charts?: ChartPaths): Table {
  const r = runs[0];
  const seeds = runs.length > 1 ? `seeds ${runs.map((x) => x.seed).join(", ")}` : `seed ${r.seed}`;
  const first = charts
    ? [`${runs.map((x) => x.offered.requests).join(" / ")} in ${r.durationS} s, ${seeds}`, chartLinks(charts)]
    : [];
  const blank = first.map(() => "");
  return {
    headers: ["scenario", ...(charts ? ["offered", "charts"] : []), ...t.headers],
    numeric: [false, ...first.map(() => false), ...t.numeric],
    rows: t.rows.map((row, i) => [r.scenario, ...(i === 0 ? first : blank), ...row]),
  };
}

function chartLinks(charts: ChartPaths): string {
  return [`[CDF](${charts.cdf})`, `[p95](${charts.timeline})`, ...(charts.admission ? [`[429s](${charts.admission})`] : [])].join(" ");
}

/** A live run's rows: the results (mean and range over several seeds), the charts linked. */
export function liveTable(runs: readonly ScenarioResult[], charts: ChartPaths): Table {
  return scenarioRows(mergeTwins(resultsTable(runs)), runs, charts);
}

/** A live run's admission rows; none where no policy refused a request. */
export function liveAdmissionTable(runs: readonly ScenarioResult[]): Table {
  const t = admissionTable(runs);
  return scenarioRows(anyRefusal(runs) ? t : { ...t, rows: [] }, runs);
}

function fleetText(r: ScenarioResult): string {
  const groups = new Map<string, number>();
  for (const p of r.fleet) {
    const speed = Number.isInteger(p.speed) ? p.speed.toFixed(1) : String(p.speed);
    const key = `${p.pod.replace(/-\d+$/, "")} (${p.model}, speed ${speed})`;
    groups.set(key, (groups.get(key) ?? 0) + 1);
  }
  return [...groups.entries()].map(([k, n]) => `${n} × ${k}`).join(", ");
}

/** The line that opens a simulated scenario's block: the run, the scenario, what was offered, and the command that wrote it. */
function headLine(runs: readonly ScenarioResult[], command: string, extra = ""): string {
  const r = runs[0];
  const o = r.offered;
  const desc = /[.!?]$/.test(r.description) ? r.description : `${r.description}.`;
  const label = runs.length > 1 ? `Offered with seed ${r.seed}` : "Offered";
  const others = runs.length > 1 ? ` Requests with ${runs.slice(1).map((x) => `seed ${x.seed} ${x.offered.requests}`).join(", ")}.` : "";
  return (
    `**Simulated**, ${runs.length > 1 ? `seeds ${runs.map((x) => x.seed).join(", ")}` : `seed ${r.seed}`}. ${desc} Fleet: ${fleetText(r)}. ` +
    `${label}: ${o.requests} requests over ${r.durationS} s (${o.ratePerS} req/s), mean prompt ${o.meanPromptTokens} tokens, mean output ${o.meanOutputTokens} tokens.` +
    `${others} By \`${command}\`.${extra}`
  );
}

/** The charts, on one line: the TTFT distribution, p95 over time, and for admission runs p95 from first arrival and 429s. */
function chartLine(r: ScenarioResult, charts: ChartPaths): string {
  const images = [`![${r.scenario}: TTFT distribution](${charts.cdf})`, `![${r.scenario}: p95 TTFT over time](${charts.timeline})`];
  if (charts.admission) images.push(`![${r.scenario}: p95 TTFT from first arrival and 429s over time](${charts.admission})`);
  return images.join(" ");
}

/**
 * One row for ours and its admission-off twin where they match in every cell
 * (nothing came near admission); the admission on-and-off table says by how
 * much they differ elsewhere.
 */
export function mergeTwins(t: Table): Table {
  const same = (a: string[], b: string[]) => a.slice(1).join("|") === b.slice(1).join("|");
  const twinOf = (row: string[]) => t.rows.find((r) => r[0] === row[0] + NO_ADMISSION);
  const merged = new Set(t.rows.filter((row) => twinOf(row) && same(row, twinOf(row)!)).map((row) => row[0]));
  const rows = t.rows
    .filter((row) => !(row[0].endsWith(NO_ADMISSION) && merged.has(row[0].slice(0, -NO_ADMISSION.length))))
    .map((row) => (merged.has(row[0]) ? [`${row[0]}, admission on or off`, ...row.slice(1)] : row));
  return { ...t, rows };
}

const anyRefusal = (runs: readonly ScenarioResult[]) => runs.some((r) => r.policies.some((p) => p.admission.total.refused > 0));

/**
 * The admission table, for runs with classes or refusals; where no policy
 * refused anything the table would be all zeros, so the head line says so instead.
 */
function admissionParts(runs: readonly ScenarioResult[]): { note: string; lines: string[] } {
  if (!showsAdmission(runs[0])) return { note: "", lines: [] };
  if (!anyRefusal(runs)) return { note: " No policy refused a request.", lines: [] };
  const seeds = runs.map((r) => r.seed);
  const caption = seeds.length > 1 ? `Admission, each seed's value (seed ${seeds.join(" / ")}):` : `Admission (seed ${seeds[0]}):`;
  return { note: "", lines: ["", caption, "", markdownTable(admissionTable(runs))] };
}

/** A simulated scenario's block, for one seed or several: the head line, the charts, the results table, goodput by class where there are classes, admission. */
export function scenarioBlock(runs: readonly ScenarioResult[], charts: ChartPaths, command: string): string {
  const summary = summariseSeeds(runs);
  const admission = admissionParts(runs);
  const classes = sloClasses(summary).map((c) => c[0].toUpperCase() + c.slice(1));
  const byClass = hasClasses(summary) ? ["", `SLO goodput by class, ${classes.join(" / ")} (of each class's own requests; mean over the seeds):`, "", markdownTable(sloByClassTable(summary))] : [];
  return [headLine(runs, command, admission.note), chartLine(runs[0], charts), "", markdownTable(mergeTwins(resultsTable(runs))), ...byClass, ...admission.lines].join("\n");
}
