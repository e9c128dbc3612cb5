// BENCHMARKS.md holds hand-written text around generated blocks; a run
// rewrites only what lies between a block's markers,
// `<!-- KEY:start -->` ... `<!-- KEY:end -->`.
import type { ScenarioResult } from "../types.js";
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

/** The generated part of a scenario's section. `charts` are paths relative to BENCHMARKS.md. */
export function scenarioBlock(r: ScenarioResult, charts: { cdf: string; timeline: string }, command: string): string {
  const o = r.offered;
  return [
    `Scenario \`${r.scenario}\`: ${r.description}`,
    "",
    `Fleet: ${fleetText(r)}. Offered: ${o.requests} requests over ${r.durationS} s (${o.ratePerS} req/s), ` +
      `mean prompt ${o.meanPromptTokens} tokens, mean output ${o.meanOutputTokens} tokens. ` +
      `${r.mode} mode, seed ${r.seed}.`,
    "",
    markdownTable(resultsTable(r)),
    "",
    "Changes are against round-robin: negative latency and positive req/s are better.",
    "",
    `![${r.scenario}: TTFT distribution](${charts.cdf})`,
    `![${r.scenario}: p95 TTFT over time](${charts.timeline})`,
    "",
    `Produced by \`${command}\`; this scenario alone: \`npm run bench -- --scenario ${r.scenario}${r.mode === "live" ? " --mode live" : ""}\`.`,
  ].join("\n");
}
