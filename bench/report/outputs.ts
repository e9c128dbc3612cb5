// Files of a scenario run: JSON results and the two charts.
import { copyFileSync, mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import type { ScenarioResult } from "../types.js";
import { ttftCdfChart, ttftTimelineChart } from "./charts.js";

export const CHART_FILES = { cdf: "ttft-cdf.svg", timeline: "ttft-timeline.svg" } as const;

/** Writes `value` as indented JSON, creating the folder. */
export function writeJson(path: string, value: unknown): void {
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, JSON.stringify(value, null, 2) + "\n");
}

/** Writes the two charts into `dir`; returns their paths. */
export async function writeCharts(result: ScenarioResult, dir: string): Promise<{ cdf: string; timeline: string }> {
  mkdirSync(dir, { recursive: true });
  const cdf = join(dir, CHART_FILES.cdf);
  const timeline = join(dir, CHART_FILES.timeline);
  writeFileSync(cdf, await ttftCdfChart(result));
  writeFileSync(timeline, await ttftTimelineChart(result));
  return { cdf, timeline };
}

/** Committed copies, named `<scenario>-ttft-cdf.svg`; returns their file names. */
export function publishCharts(scenario: string, charts: { cdf: string; timeline: string }, chartDir: string): { cdf: string; timeline: string } {
  mkdirSync(chartDir, { recursive: true });
  const names = { cdf: `${scenario}-${CHART_FILES.cdf}`, timeline: `${scenario}-${CHART_FILES.timeline}` };
  copyFileSync(charts.cdf, join(chartDir, names.cdf));
  copyFileSync(charts.timeline, join(chartDir, names.timeline));
  return names;
}
