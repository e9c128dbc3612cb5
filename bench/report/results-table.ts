// The per-policy results table of a scenario. A run on several seeds shows
// the mean (min-max) of each figure, each seed's p95 TTFT, and the range of
// the per-seed changes against round-robin; one run is a one-seed summary
// of the same columns, plus what only a single run can show (counts, E2E
// p50 and p99, output tokens, error reasons).
import { BASELINE } from "../policies/index.js";
import { formatChange, relativeChange } from "../stats.js";
import { summariseSeeds, type PolicySeeds, type SeedsSummary, type Spread } from "../seeds.js";
import { PRIORITIES, SLO_TTFT_MS, type PolicyResult, type ScenarioResult } from "../types.js";
import { formatMs, percent, percentOf, tableOf, type Column, type Table } from "./table.js";

/** "TTFT ≤ 2 s", ...: the SLO goodput columns' headers, aligned with SLO_TTFT_MS. */
const SLO_HEADERS = SLO_TTFT_MS.map((ms) => `TTFT ≤ ${ms / 1000} s`);

/** "1.40 s (1.31 s–1.52 s)". */
export function spreadCell(s: Spread | null | undefined, format: (x: number) => string): string {
  if (!s) return "n/a";
  return s.min === s.max ? format(s.mean) : `${format(s.mean)} (${format(s.min)}–${format(s.max)})`;
}

/** "-99.3% … -99.1%": every seed's change lies in the range. */
function changeRange(s: Spread | undefined): string {
  if (!s) return "-";
  const lo = formatChange(s.min);
  const hi = formatChange(s.max);
  return lo === hi ? lo : `${lo} … ${hi}`;
}

/** "0", or each seed's count: "3 / 0 / 12". */
const perSeed = (counts: readonly number[]) => (counts.every((n) => n === 0) ? "0" : counts.join(" / "));

function errorsCell(p: PolicyResult): string {
  if (p.errors === 0) return "0";
  const reasons = Object.entries(p.errorsByReason).map(([r, n]) => `${n} ${r}`);
  return `${p.errors} (${reasons.join(", ")})`;
}

/** The busiest and the idlest pod's share of the requests, e.g. "17% / 8%": how even (or how skewed) the split is. */
function podShareCell(share: Record<string, number>): string {
  const values = Object.values(share);
  // Real servers do not say which pod answered (the fakes' x-served-by).
  return values.every((v) => v === 0) ? "n/a" : `${percent(Math.max(...values))} / ${percent(Math.min(...values))}`;
}

/** `runs`: one scenario's results, one per seed. */
export function resultsTable(runs: readonly ScenarioResult[]): Table {
  const s = summariseSeeds(runs);
  const one = runs.length === 1 ? runs[0].policies : undefined;
  const result = (p: PolicySeeds) => one!.find((r) => r.policy === p.policy)!;
  const base = one?.find((p) => p.policy === BASELINE);
  const only = (columns: Column<PolicySeeds>[]) => (one ? columns : []);
  const columns: Column<PolicySeeds>[] = [
    ["policy", false, (p) => p.policy],
    ...SLO_HEADERS.map((h, i): Column<PolicySeeds> => [h, true, (p) => spreadCell(p.ttftSlo.all[i], percentOf)]),
    one
      ? ["completed", true, (p) => { const r = result(p); return `${r.completed}/${r.requests} (${percentOf(r.completedShare)})`; }]
      : ["completed", true, (p) => spreadCell(p.completedShare, percentOf)],
    ["1st try refused", true, (p) => spreadCell(p.firstRefusedShare, percentOf)],
    ["TTFT p50", true, (p) => spreadCell(p.ttftMs?.p50, formatMs)],
    ["TTFT p95", true, (p) => spreadCell(p.ttftMs?.p95, formatMs)],
    ["TTFT p99", true, (p) => spreadCell(p.ttftMs?.p99, formatMs)],
    ...(one ? [] : [[`TTFT p95, seed ${s.seeds.join(" / ")}`, true, (p) => p.ttftP95BySeed.map((x) => formatMs(x ?? undefined)).join(" / ")] as Column<PolicySeeds>]),
    ...only([["E2E p50", true, (p) => formatMs(result(p).e2eMs?.p50)]]),
    ["E2E p95", true, (p) => formatMs(p.e2eP95Ms?.mean)],
    ...only([["E2E p99", true, (p) => formatMs(result(p).e2eMs?.p99)]]),
    ["req/s", true, (p) => spreadCell(p.requestsPerS, (x) => x.toFixed(2))],
    ...only([["out tok/s", true, (p) => result(p).throughput.outputTokensPerS.toFixed(0)]]),
    ["prefix hits", true, (p) => percent(p.prefixHitRate.mean)],
  ];
  if (s.policies.some((p) => p.serverCacheReuse !== null)) columns.push(["server cache reuse", true, (p) => spreadCell(p.serverCacheReuse, percent)]);
  if (s.policies.some((p) => (p.adapterLoadsPer1k?.mean ?? 0) > 0)) {
    columns.push(["adapter loads /1k req", true, (p) => spreadCell(p.adapterLoadsPer1k, (x) => x.toFixed(1))]);
  }
  columns.push(
    ["preemptions", true, (p) => p.preemptions?.mean.toFixed(0) ?? "n/a"],
    ["pod share max / min", true, (p) => podShareCell(p.podShare)],
    ["timeouts", true, (p) => perSeed(p.timeouts)],
    ["errors", true, (p) => (one ? errorsCell(result(p)) : perSeed(p.errors))],
  );
  if (s.policies.some((p) => p.policy === BASELINE)) {
    const e2eP95 = (p: PolicySeeds) => (p.policy === BASELINE ? "-" : formatChange(relativeChange(result(p).e2eMs?.p95, base!.e2eMs?.p95)));
    columns.push(
      ["p95 TTFT vs RR", true, (p) => changeRange(p.vsBaseline?.ttftP95)],
      ["p99 TTFT vs RR", true, (p) => changeRange(p.vsBaseline?.ttftP99)],
      ...only([["p95 E2E vs RR", true, e2eP95]]),
      ["req/s vs RR", true, (p) => changeRange(p.vsBaseline?.requestsPerS)],
    );
  }
  return tableOf(columns, s.policies);
}

/** Whether the scenario has more than one class: then its SLO goodput is given per class too. */
export const hasClasses = (s: SeedsSummary) => s.policies.some((p) => Object.keys(p.ttftSlo?.byClass ?? {}).length > 1);

/** The classes the run had, in PRIORITIES order. */
export const sloClasses = (s: SeedsSummary) => PRIORITIES.filter((c) => s.policies.some((p) => p.ttftSlo?.byClass[c]));

/**
 * SLO goodput per class: one row per policy, each cell the classes' shares
 * of their own requests served within that SLO, "76% / 52% / 34%" in
 * sloClasses order, each the mean over the seeds.
 */
export function sloByClassTable(s: SeedsSummary): Table {
  const classes = sloClasses(s);
  const share = (x: Spread | undefined) => (x ? percentOf(x.mean) : "n/a");
  const cell = (p: PolicySeeds, i: number) => classes.map((c) => share(p.ttftSlo?.byClass[c]?.[i])).join(" / ");
  const columns: Column<PolicySeeds>[] = [
    ["policy", false, (p) => p.policy],
    ...SLO_HEADERS.map((h, i): Column<PolicySeeds> => [h, true, (p) => cell(p, i)]),
  ];
  return tableOf(columns, s.policies);
}
