// The gateway-replica tables: per scenario and policy, TTFT p50/p95/p99 and
// the goodput for each replica count (mean over the seeds, range in
// brackets) with the loss against one gateway, on the console; and one table
// over every scenario, a column per replica count, on the console and in
// BENCHMARKS.md.
import { spread, type Spread } from "../seeds.js";
import { formatChange, relativeChange } from "../stats.js";
import type { PolicyResult, ScenarioResult } from "../types.js";
import { spreadCell } from "./results-table.js";
import { formatMs, markdownTable, percentOf, tableOf, type Column, type Table } from "./table.js";

/** The target: R replicas within this much of one gateway's p95 and p99 TTFT. */
export const REPLICA_LOSS_TARGET = 0.05;

export interface ReplicaRow {
  scenario: string;
  policy: string;
  replicas: number;
  seeds: number[];
  completedShare: Spread;
  ttftMs: { p50: Spread; p95: Spread; p99: Spread } | null;
  /** Range of the per-seed changes against the same seed with one gateway; null without a one-gateway run. */
  vsOne: { p95: Spread; p99: Spread } | null;
}

/** `runs`: one scenario's results per replica count, each a list over the same seeds. */
export function replicaRows(runs: ReadonlyMap<number, readonly ScenarioResult[]>): ReplicaRow[] {
  const one = runs.get(1);
  const rows: ReplicaRow[] = [];
  const first = [...runs.values()][0];
  for (const { policy } of first[0].policies) {
    for (const [replicas, results] of [...runs].sort((a, b) => a[0] - b[0])) {
      const mine = results.map((r) => r.policies.find((p) => p.policy === policy)!);
      const base = one?.map((r) => r.policies.find((p) => p.policy === policy)!);
      const of = (f: (p: PolicyResult) => number | undefined) => spread(mine.map(f));
      const change = (f: (p: PolicyResult) => number | undefined) => (base ? spread(mine.map((p, i) => relativeChange(f(p), f(base[i])))) : null);
      const [p50, p95, p99] = [of((p) => p.ttftMs?.p50), of((p) => p.ttftMs?.p95), of((p) => p.ttftMs?.p99)];
      const [l95, l99] = [change((p) => p.ttftMs?.p95), change((p) => p.ttftMs?.p99)];
      rows.push({
        scenario: results[0].scenario,
        policy,
        replicas,
        seeds: results.map((r) => r.seed),
        completedShare: of((p) => p.completedShare)!,
        ttftMs: p50 && p95 && p99 ? { p50, p95, p99 } : null,
        vsOne: l95 && l99 ? { p95: l95, p99: l99 } : null,
      });
    }
  }
  return rows;
}

/** "+3.1% (+1.0% … +5.2%)": the mean of the per-seed changes, and their range. */
function changeCell(s: Spread | undefined): string {
  if (!s) return "-";
  const [mean, lo, hi] = [formatChange(s.mean), formatChange(s.min), formatChange(s.max)];
  return lo === hi ? mean : `${mean} (${lo} … ${hi})`;
}

/** One scenario's rows: goodput beside the percentiles, and the change against one gateway. */
export function replicaTable(rows: readonly ReplicaRow[]): Table {
  const columns: Column<ReplicaRow>[] = [
    ["policy", false, (r) => r.policy],
    ["replicas", true, (r) => String(r.replicas)],
    ["completed", true, (r) => spreadCell(r.completedShare, percentOf)],
    ["TTFT p50", true, (r) => spreadCell(r.ttftMs?.p50, formatMs)],
    ["TTFT p95", true, (r) => spreadCell(r.ttftMs?.p95, formatMs)],
    ["TTFT p99", true, (r) => spreadCell(r.ttftMs?.p99, formatMs)],
    ["p95 vs 1 replica", true, (r) => (r.replicas === 1 ? "-" : changeCell(r.vsOne?.p95))],
    ["p99 vs 1 replica", true, (r) => (r.replicas === 1 ? "-" : changeCell(r.vsOne?.p99))],
  ];
  return tableOf(columns, rows);
}

const within = (s: Spread | undefined) => s !== undefined && s.mean <= REPLICA_LOSS_TARGET;

/** "100%, 1.80 s / 2.65 s (+15% / +6.2%)": goodput, p95 / p99 TTFT and, past one replica, their mean change against one. */
function gridCell(r: ReplicaRow | undefined): string {
  if (!r) return "-";
  const latency = `${percentOf(r.completedShare.mean)}, ${formatMs(r.ttftMs?.p95.mean)} / ${formatMs(r.ttftMs?.p99.mean)}`;
  return r.replicas === 1 || !r.vsOne ? latency : `${latency} (${formatChange(r.vsOne.p95.mean)} / ${formatChange(r.vsOne.p99.mean)})`;
}

/** Every scenario and policy on one row, a column per replica count, and whether `lossAt` replicas meet the target. */
export function replicaGridTable(rows: readonly ReplicaRow[], lossAt: number): Table {
  const counts = [...new Set(rows.map((r) => r.replicas))].sort((a, b) => a - b);
  const lines = rows.filter((r) => r.replicas === counts[0]);
  const at = (line: ReplicaRow, replicas: number) => rows.find((r) => r.scenario === line.scenario && r.policy === line.policy && r.replicas === replicas);
  const met = (r: ReplicaRow | undefined) => (within(r?.vsOne?.p95) && within(r?.vsOne?.p99) ? "yes" : "**no**");
  const columns: Column<ReplicaRow>[] = [
    ["scenario", false, (r) => r.scenario],
    ["policy", false, (r) => r.policy],
    ...counts.map((n): Column<ReplicaRow> => [`${n} replica${n === 1 ? "" : "s"}`, true, (r) => gridCell(at(r, n))]),
  ];
  if (counts.includes(1) && counts.includes(lossAt)) columns.push([`${lossAt} within ${REPLICA_LOSS_TARGET * 100}% of 1`, false, (r) => met(at(r, lossAt))]);
  return tableOf(columns, lines);
}

/** The Markdown section: what was run, in one paragraph, then one table over every scenario. */
export function replicasMarkdown(rows: readonly ReplicaRow[], opts: { command: string; lossAt: number; durationS: number; shareIntervalMs?: number }): string {
  const counts = [...new Set(rows.map((r) => r.replicas))].sort((a, b) => a - b);
  const seeds = rows[0]?.seeds ?? [];
  const sharing =
    opts.shareIntervalMs === undefined
      ? "sharing nothing but the aggregator's snapshot pushes (today's gateway)"
      : `sharing in-flight counts, prefix placements and queue boards through the aggregator every ${opts.shareIntervalMs} ms`;
  return [
    `**Simulated**, seeds ${seeds.join(", ")}, ${opts.durationS > 0 ? `${opts.durationS} s of arrivals` : "each scenario's own duration"}: ` +
      `${counts.join(", ")} gateway replicas behind a round-robin front, ${sharing}. ` +
      `Cells: completed, p95 / p99 TTFT (means over the seeds); in brackets the mean per-seed change against one replica. Target: ${opts.lossAt} replicas ` +
      `within ${REPLICA_LOSS_TARGET * 100}% of one on p95 and p99. By \`${opts.command}\`.`,
    "",
    markdownTable(replicaGridTable(rows, opts.lossAt)),
  ].join("\n");
}
