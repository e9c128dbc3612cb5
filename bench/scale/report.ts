// The scale benchmark's table, as console text or Markdown.
import { tableOf, type Column, type Table } from "../report/table.js";
import type { ScaleReport, ScaleRow } from "./index.js";

const ms = (x: number) => (x < 10 ? x.toFixed(2) : x.toFixed(1));

const COLUMNS: Column<ScaleRow>[] = [
  ["pods", true, (r) => String(r.pods)],
  ["page", true, (r) => `${(r.pageBytes / 1024).toFixed(0)} KB`],
  ["interval", true, (r) => (r.intervalMs === null ? "n/a" : `${r.intervalMs} ms`)],
  ["cycles/s", true, (r) => r.cyclesPerS.toFixed(1)],
  ["CPU/cycle", true, (r) => `${ms(r.cpuMsPerCycle)} ms`],
  ["core", true, (r) => `${(r.coreShare * 100).toFixed(0)}%`],
  ["delay p50", true, (r) => (r.delayMs ? `${ms(r.delayMs.p50)} ms` : "n/a")],
  ["delay p99", true, (r) => (r.delayMs ? `${ms(r.delayMs.p99)} ms` : "n/a")],
  ["wait p50/p99", true, (r) => (r.pushDelayMs ? `${ms(r.pushDelayMs.p50)} / ${ms(r.pushDelayMs.p99)} ms` : "n/a")],
  ["pushes/cycle", true, (r) => r.pushesPerCycle.toFixed(2)],
  ["scrapes/cycle", true, (r) => r.scrapesPerCycle.toFixed(0)],
  ["snapshot", true, (r) => `${(r.snapshotBytes / 1024).toFixed(1)} KB`],
  ["RSS", true, (r) => `${(r.rssBytes / 1024 / 1024).toFixed(0)} MB`],
  ["errors", true, (r) => String(r.scrapeErrors)],
];

export function scaleTable(report: ScaleReport): Table {
  return tableOf(COLUMNS, report.rows);
}

export function scaleTitle(report: ScaleReport): string {
  const m = report.machine;
  return (
    `aggregator at scale: configured interval ${report.configuredIntervalMs} ms, ${report.measureS} s measured per size after ${report.warmupS} s ` +
    `(${m.cpus} cores, ${m.model}, Node ${m.node}); delay = a pod serving a page to the snapshot carrying it reaching a Watch client; ` +
    "wait = inside the aggregator, the oldest change a push carried"
  );
}
