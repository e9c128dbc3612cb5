// BENCHMARKS.md holds hand-written text around generated blocks; a run
// rewrites only what lies between a block's markers,
// `<!-- KEY:start -->` ... `<!-- KEY:end -->`.
import type { SeedsSummary } from "../seeds.js";
import type { ScenarioResult } from "../types.js";
import { seedsTable } from "./seeds-table.js";
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
export const scenarioKey = (r: Pick<ScenarioResult, "scenario" | "mode">) => `${r.mode === "live" ? "live" : "scenario"}:${r.scenario}`;

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

function chartLines(r: ScenarioResult, charts: { cdf: string; timeline: string }): string[] {
  return [`![${r.scenario}: TTFT distribution](${charts.cdf})`, `![${r.scenario}: p95 TTFT over time](${charts.timeline})`];
}

function commandLines(r: ScenarioResult, command: string): string {
  return `Produced by \`${command}\`; this scenario alone: \`npm run bench -- --scenario ${r.scenario}${r.mode === "live" ? " --mode live" : ""}\`.`;
}

/** The generated part of a scenario's section. `charts` are paths relative to BENCHMARKS.md. */
export function scenarioBlock(r: ScenarioResult, charts: { cdf: string; timeline: string }, command: string): string {
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
    "",
    commandLines(r, command),
  ].join("\n");
}

/** The same for several seeds: the summary table, then the first seed's charts and full table. */
export function seedsBlock(summary: SeedsSummary, runs: readonly ScenarioResult[], charts: { cdf: string; timeline: string }, command: string): string {
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
    `Each cell is the mean over seeds ${seeds}, with the lowest and highest seed in brackets. ` +
      "The \"vs RR\" columns give the range of the seeds' changes against round-robin, each taken within its own run: " +
      "negative latency and positive req/s are better.",
    "",
    ...chartLines(first, charts),
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
