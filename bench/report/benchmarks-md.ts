// BENCHMARKS.md holds hand-written text around generated blocks; a run
// rewrites only what lies between a block's markers,
// `<!-- KEY:start -->` ... `<!-- KEY:end -->`.
import type { SeedsSummary } from "../seeds.js";
import type { ScenarioResult } from "../types.js";
import { admissionTable, onOffRows, onOffTable, showsAdmission, stepWindowsTable, type OnOffRow } from "./admission-table.js";
import type { ChartPaths } from "./outputs.js";
import { hasClasses, seedsTable, sloByClassTable } from "./seeds-table.js";
import { markdownTable, resultsTable } from "./table.js";

const start = (key: string) => `<!-- ${key}:start -->`;
const end = (key: string) => `<!-- ${key}:end -->`;

/** Replaces the block's content; a block not yet in the document is appended (under `heading`, if given). */
export function replaceBlock(doc: string, key: string, content: string, heading?: string): string {
  const a = doc.indexOf(start(key));
  const b = doc.indexOf(end(key));
  const block = `${start(key)}\n${content.trim()}\n${end(key)}`;
  if (a >= 0 && b > a) return doc.slice(0, a) + block + doc.slice(b + end(key).length);
  return `${doc.trimEnd()}\n\n${heading ? `${heading}\n\n` : ""}${block}\n`;
}

/** `scenario:NAME` for simulated results, `live:NAME` for live ones. */
export const scenarioKey = (r: Pick<ScenarioResult, "scenario" | "mode" | "pods">) => `${r.mode === "live" ? `live${r.pods ? `-${r.pods}` : ""}` : "scenario"}:${r.scenario}`;

function fleetText(r: ScenarioResult): string {
  const groups = new Map<string, number>();
  for (const p of r.fleet) {
    const speed = Number.isInteger(p.speed) ? p.speed.toFixed(1) : String(p.speed);
    const key = `${p.pod.replace(/-\d+$/, "")} (${p.model}, speed ${speed})`;
    groups.set(key, (groups.get(key) ?? 0) + 1);
  }
  return [...groups.entries()].map(([k, n]) => `${n} × ${k}`).join(", ");
}

function offeredText(r: ScenarioResult, label = "Offered"): string {
  const o = r.offered;
  return (
    `Fleet: ${fleetText(r)}. ${label}: ${o.requests} requests over ${r.durationS} s (${o.ratePerS} req/s), ` +
    `mean prompt ${o.meanPromptTokens} tokens, mean output ${o.meanOutputTokens} tokens.`
  );
}

function chartLines(r: ScenarioResult, charts: ChartPaths): string[] {
  return [`![${r.scenario}: TTFT distribution](${charts.cdf})`, `![${r.scenario}: p95 TTFT over time](${charts.timeline})`];
}

/**
 * The admission part of a scenario's section: for runs with classes or
 * refusals the admission table, the step's windows and the chart; for runs
 * with ours both with and without admission, the comparison of the two.
 */
export function admissionLines(runs: readonly ScenarioResult[], charts: ChartPaths): string[] {
  const first = runs[0];
  const lines: string[] = [];
  const seeds = runs.length > 1 ? ` Cells give each seed's value, seed ${runs.map((r) => r.seed).join(" / ")}.` : "";
  if (showsAdmission(first)) {
    lines.push(
      "",
      `**Admission.** A refused (429) request is sent again as the OpenAI SDKs do (up to 2 retries: after its Retry-After when under 60 s, else after 0.5 s then 1 s, less up to 25%); "retried OK" counts the requests retried and then completed. ` +
        "Refused shares are of each class's requests (Critical, Standard, Sheddable). Latencies are, as everywhere here, of every request from its first arrival, a failed one counted at the run's deadline; " +
        "a window's p95 is over the requests that first arrived in it. Recovery: how long after the step's end the first 5-s window starts whose p95 is back within 1.25× the base's (0 s: the first one after the step)." +
        seeds,
      "",
      markdownTable(admissionTable(runs)),
    );
    const windows = stepWindowsTable(first);
    if (windows) lines.push("", `p95 TTFT (from first arrival) per 5-s window of first arrival through the step, and its 429s (seed ${first.seed}):`, "", markdownTable(windows));
    if (charts.admission) lines.push("", `![${first.scenario}: p95 TTFT from first arrival and 429s over time](${charts.admission})`);
  }
  const rows = onOffRows(runs);
  if (rows.length > 0) {
    lines.push(
      "",
      `**Ours with admission against without** (changes with admission on, against off; target where nothing overloads: no 429, every TTFT percentile within 1%).${seeds}`,
      "",
      markdownTable(onOffTable(rows)),
    );
  }
  return lines;
}

const ON_OFF_INTRO =
  "Ours with admission (the `latency` profile's defaults) against the same policy with admission off, on every scenario: the 429s each gave, and the change of each TTFT percentile and of req/s with admission on. " +
  "Where nothing overloads the target is no 429 and no percentile moved by more than 1%. Cells give each seed's value.";

/**
 * BENCHMARKS.md's admission summary, a with/without row per scenario: from
 * `rows` alone after a run of `every` scenario; otherwise the rows of the
 * scenarios run are replaced (or added, in name order) and the others kept,
 * with `command` named as the source of the refreshed ones.
 */
export function withOnOffRows(doc: string, rows: readonly OnOffRow[], command: string, every: boolean): string {
  const a = doc.indexOf(start(ON_OFF_KEY));
  const b = doc.indexOf(end(ON_OFF_KEY));
  if (every || a < 0 || b < a) {
    return replaceBlock(doc, ON_OFF_KEY, [ON_OFF_INTRO, "", markdownTable(onOffTable(rows)), "", `Produced by \`${command}\`.`].join("\n"), ON_OFF_HEADING);
  }
  const old = doc.slice(a + start(ON_OFF_KEY).length, b).trim().split("\n");
  const table = markdownTable(onOffTable(rows)).split("\n");
  const [header, rule] = table;
  const scenarioOf = (line: string) => line.split("|")[1].trim();
  const byScenario = new Map<string, string>();
  for (const line of old.slice(old.indexOf(rule) + 1)) {
    if (!line.startsWith("| ")) break;
    byScenario.set(scenarioOf(line), line);
  }
  for (const line of table.slice(2)) byScenario.set(scenarioOf(line), line);
  const lines = [...byScenario.keys()].sort().map((k) => byScenario.get(k)!);
  // The whole table's source stays named; the refreshed rows' is added.
  const source = old.find((line) => line.startsWith(PRODUCED_BY));
  const produced = source ? source.slice(0, source.indexOf("`", PRODUCED_BY.length) + 1) : `${PRODUCED_BY}npm run bench -- --all\``;
  const footer = `${produced}; the ${rows.map((r) => r.scenario).join(", ")} rows by \`${command}\`.`;
  return replaceBlock(doc, ON_OFF_KEY, [ON_OFF_INTRO, "", header, rule, ...lines, "", footer].join("\n"));
}

const ON_OFF_KEY = "admission:on-off";
const PRODUCED_BY = "Produced by `";
const ON_OFF_HEADING = "### Admission on and off";

function commandLines(r: ScenarioResult, command: string): string {
  return `Produced by \`${command}\`; this scenario alone: \`npm run bench -- --scenario ${r.scenario}${r.mode === "live" ? " --mode live" : ""}\`.`;
}

/** The generated part of a scenario's section. `charts` are paths relative to BENCHMARKS.md. */
export function scenarioBlock(r: ScenarioResult, charts: ChartPaths, command: string): string {
  return [
    `Scenario \`${r.scenario}\`: ${r.description}`,
    "",
    `${offeredText(r)} ${r.mode} mode, seed ${r.seed}.`,
    "",
    markdownTable(resultsTable(r)),
    "",
    "Changes are against round-robin: negative latency and positive req/s are better.",
    "",
    ...chartLines(r, charts),
    ...admissionLines([r], charts),
    "",
    commandLines(r, command),
  ].join("\n");
}

/** The same for several seeds: the summary table, then the first seed's charts and full table. */
export function seedsBlock(summary: SeedsSummary, runs: readonly ScenarioResult[], charts: ChartPaths, command: string): string {
  const first = runs[0];
  const seeds = summary.seeds.join(", ");
  const others = runs.slice(1).map((r) => `seed ${r.seed} ${r.offered.requests}`);
  return [
    `Scenario \`${first.scenario}\`: ${first.description}`,
    "",
    `${offeredText(first, `Offered with seed ${first.seed}`)} Requests with ${others.join(", ")}. ${first.mode} mode, seeds ${seeds}.`,
    "",
    markdownTable(seedsTable(summary)),
    "",
    ...(hasClasses(summary) ? ["SLO goodput by class (share of each class's own requests):", "", markdownTable(sloByClassTable(summary)), ""] : []),
    "`TTFT ≤ N s`: the share of all offered requests served with TTFT from first arrival within N s; a refusal, error or timeout never counts. " +
      `Each cell is the mean over seeds ${seeds}, with the lowest and highest seed in brackets. ` +
      "The \"vs RR\" columns give the range of the seeds' changes against round-robin, each taken within its own run: " +
      "negative latency and positive req/s are better.",
    "",
    ...chartLines(first, charts),
    ...admissionLines(runs, charts),
    "",
    "<details>",
    `<summary>Seed ${first.seed} in full</summary>`,
    "",
    markdownTable(resultsTable(first)),
    "",
    "</details>",
    "",
    commandLines(first, command),
  ].join("\n");
}
