// The per-policy table of a scenario run on several seeds: mean (min-max)
// of each figure, each seed's p95 TTFT, and the range of the per-seed
// changes against round-robin.
import { BASELINE } from "../policies/index.js";
import { formatChange } from "../stats.js";
import type { PolicySeeds, SeedsSummary, Spread } from "../seeds.js";
import { PRIORITIES } from "../types.js";
import { formatMs, percent, percentOf, podShareCell, SLO_HEADERS, tableOf, type Column, type Table } from "./table.js";

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

export function seedsTable(s: SeedsSummary): Table {
  const columns: Column<PolicySeeds>[] = [
    ["policy", false, (p) => p.policy],
    ...SLO_HEADERS.map((h, i): Column<PolicySeeds> => [h, true, (p) => spreadCell(p.ttftSlo?.all[i], percentOf)]),
    ["completed", true, (p) => spreadCell(p.completedShare, percentOf)],
    ["1st try refused", true, (p) => spreadCell(p.firstRefusedShare, percentOf)],
    ["TTFT p50", true, (p) => spreadCell(p.ttftMs?.p50, formatMs)],
    ["TTFT p95", true, (p) => spreadCell(p.ttftMs?.p95, formatMs)],
    ["TTFT p99", true, (p) => spreadCell(p.ttftMs?.p99, formatMs)],
    [`TTFT p95, seed ${s.seeds.join(" / ")}`, true, (p) => p.ttftP95BySeed.map((x) => formatMs(x ?? undefined)).join(" / ")],
    ["E2E p95", true, (p) => formatMs(p.e2eP95Ms?.mean)],
    ["req/s", true, (p) => spreadCell(p.requestsPerS, (x) => x.toFixed(2))],
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
    ["errors", true, (p) => perSeed(p.errors)],
  );
  if (s.policies.some((p) => p.policy === BASELINE)) {
    columns.push(
      ["p95 TTFT vs RR", true, (p) => changeRange(p.vsBaseline?.ttftP95)],
      ["p99 TTFT vs RR", true, (p) => changeRange(p.vsBaseline?.ttftP99)],
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
