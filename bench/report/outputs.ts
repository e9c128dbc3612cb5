// Files of a scenario run: JSON results and the charts (two, and a third for
// runs with classes or refusals).
import { copyFileSync, mkdirSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import type { ScenarioResult } from "../types.js";
import { showsAdmission } from "./admission-table.js";
import { admissionTimelineChart, ttftCdfChart, ttftTimelineChart } from "./charts.js";

export const CHART_FILES = { cdf: "ttft-cdf.svg", timeline: "ttft-timeline.svg", admission: "admission-timeline.svg" } as const;

export interface ChartPaths {
  cdf: string;
  timeline: string;
  /** Only for runs with classes or refusals. */
  admission?: string;
}

/** Writes `value` as indented JSON, creating the folder. */
export function writeJson(path: string, value: unknown): void {
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, JSON.stringify(value, null, 2) + "\n");
}

/** Writes the charts into `dir`; returns their paths. */
export async function writeCharts(result: ScenarioResult, dir: string): Promise<ChartPaths> {
  mkdirSync(dir, { recursive: true });
  const paths: ChartPaths = { cdf: join(dir, CHART_FILES.cdf), timeline: join(dir, CHART_FILES.timeline) };
  writeFileSync(paths.cdf, await ttftCdfChart(result));
  writeFileSync(paths.timeline, await ttftTimelineChart(result));
  if (showsAdmission(result)) {
    paths.admission = join(dir, CHART_FILES.admission);
    writeFileSync(paths.admission, await admissionTimelineChart(result));
  }
  return paths;
}

/** Committed copies in `chartDir`, named `<scenario>-ttft-cdf.svg`; returns their paths relative to `root`. */
export function publishCharts(scenario: string, charts: ChartPaths, chartDir: string, root: string): ChartPaths {
  mkdirSync(chartDir, { recursive: true });
  const published = {} as ChartPaths;
  for (const key of ["cdf", "timeline", "admission"] as const) {
    if (!charts[key]) continue;
    const path = join(chartDir, `${scenario}-${CHART_FILES[key]}`);
    copyFileSync(charts[key], path);
    published[key] = relative(root, path);
  }
  return published;
}
