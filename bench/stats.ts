// Summaries of request records: percentiles, throughput, CDF and timeline
// points, and relative changes between policies. Every request counts in
// every percentile, timed from its first arrival; one that failed counts at
// the run's deadline (types.ts ttftFromArrival), so a policy cannot look
// faster by refusing or dropping requests.
import { admissionSummary, type LoadStep } from "./admission.js";
import { latencySummary, percentile, round3 } from "./percentiles.js";
import {
  e2eFromArrival, e2eOf, errorReason, isTimeout, lastArrivalMs, PRIORITIES, SLO_TTFT_MS, ttftFromArrival,
  type EngineTotals, type PolicyResult, type RunRecord, type SloShares, type TimelinePoint,
} from "./types.js";

/** `points` evenly spaced quantiles plus the extremes; enough for a chart, small in JSON. */
export function cdf(values: readonly number[], points = 200): Array<[number, number]> {
  if (values.length === 0) return [];
  const sorted = [...values].sort((a, b) => a - b);
  const out: Array<[number, number]> = [];
  for (let i = 0; i <= points; i++) {
    const q = i / points;
    out.push([round3(percentile(sorted, q)), q]);
  }
  return out;
}

/** TTFT percentiles (from first arrival, failures at the deadline) per first-arrival window of `windowS` seconds. */
export function timeline(records: readonly RunRecord[], windowS: number, deadlineMs: number): TimelinePoint[] {
  const buckets = new Map<number, number[]>();
  for (const r of records) {
    const w = Math.floor(r.atMs / 1000 / windowS);
    let b = buckets.get(w);
    if (!b) buckets.set(w, (b = []));
    b.push(ttftFromArrival(r, deadlineMs));
  }
  return [...buckets.entries()]
    .sort((a, b) => a[0] - b[0])
    .map(([w, values]) => {
      values.sort((a, b) => a - b);
      return { t: round3(w * windowS), n: values.length, p50: round3(percentile(values, 0.5)), p95: round3(percentile(values, 0.95)) };
    });
}

/** About 120 windows over the run, at least 5 s each. */
function timelineWindowS(durationS: number): number {
  return Math.max(5, Math.ceil(durationS / 120));
}

export interface PolicyMeta {
  policy: string;
  description: string;
  podNames: readonly string[];
  durationS: number;
  /** The run's deadline (the last arrival plus the drain limit), on the plan's clock: where a failed request counts. */
  deadlineMs: number;
  /** The engines' counters summed over the pods, where the mode can read them (not live). */
  engines?: EngineTotals;
  /** The scenario's load step, if it has one (admission.ts loadStep). */
  step?: LoadStep;
  /** Real servers' own prompt-cache counters over the run, where they export them. */
  serverCache?: { cachedTokens: number; processedTokens: number };
}

function serverCacheReuse(c: PolicyMeta["serverCache"]): number | null {
  if (c === undefined) return null;
  const total = c.cachedTokens + c.processedTokens;
  return total > 0 ? round3(c.cachedTokens / total) : 0;
}

/** The share of `records` served within each SLO_TTFT_MS, from first arrival; failures count as misses. */
function withinSlos(records: readonly RunRecord[], deadlineMs: number): number[] {
  const ttft = records.filter((r) => r.error === undefined).map((r) => ttftFromArrival(r, deadlineMs));
  return SLO_TTFT_MS.map((slo) => (records.length > 0 ? round3(ttft.filter((t) => t <= slo).length / records.length) : 0));
}

export function sloShares(records: readonly RunRecord[], deadlineMs: number): SloShares {
  const byClass: SloShares["byClass"] = {};
  for (const p of PRIORITIES) {
    const mine = records.filter((r) => r.priority === p);
    if (mine.length > 0) byClass[p] = withinSlos(mine, deadlineMs);
  }
  return { all: withinSlos(records, deadlineMs), byClass };
}

function shares(counts: Record<string, number>): Record<string, number> {
  const total = Object.values(counts).reduce((s, n) => s + n, 0);
  return Object.fromEntries(Object.entries(counts).map(([k, n]) => [k, total > 0 ? round3(n / total) : 0]));
}

export function policyResult(meta: PolicyMeta, records: readonly RunRecord[]): PolicyResult {
  const ok = records.filter((r) => r.error === undefined);
  const timedOut = records.filter(isTimeout);
  const ttft = records.map((r) => ttftFromArrival(r, meta.deadlineMs));
  const e2e = records.map((r) => e2eFromArrival(r, meta.deadlineMs));
  const errorsByReason: Record<string, number> = {};
  for (const r of records) {
    if (r.error === undefined || isTimeout(r)) continue;
    const reason = errorReason(r.error);
    errorsByReason[reason] = (errorsByReason[reason] ?? 0) + 1;
  }

  let first = Infinity;
  let last = 0;
  for (const r of records) first = Math.min(first, r.atMs);
  // The run was not done before its last completion, or the drain deadline if anything timed out.
  for (const r of ok) last = Math.max(last, lastArrivalMs(r) + e2eOf(r));
  if (timedOut.length > 0) last = Math.max(last, meta.deadlineMs);
  const makespanS = ok.length > 0 ? (last - first) / 1000 : 0;
  const outputTokens = ok.reduce((s, r) => s + r.outputTokens, 0);
  const promptTokens = ok.reduce((s, r) => s + r.promptTokens, 0);

  const perPod: Record<string, number> = {};
  for (const name of meta.podNames) perPod[name] = 0;
  for (const r of records) if (r.servedBy !== null && Object.hasOwn(perPod, r.servedBy)) perPod[r.servedBy]++;

  return {
    policy: meta.policy,
    description: meta.description,
    requests: records.length,
    completed: ok.length,
    completedShare: records.length > 0 ? round3(ok.length / records.length) : 0,
    firstRefusedShare: records.length > 0 ? round3(records.filter((r) => r.firstRefusal !== undefined).length / records.length) : 0,
    timeouts: timedOut.length,
    errors: records.length - ok.length - timedOut.length,
    errorsByReason,
    ttftMs: latencySummary(ttft),
    e2eMs: latencySummary(e2e),
    throughput: {
      requestsPerS: makespanS > 0 ? round3(ok.length / makespanS) : 0,
      outputTokensPerS: makespanS > 0 ? round3(outputTokens / makespanS) : 0,
    },
    perPod,
    podShare: shares(perPod),
    prefixHitRate: promptTokens > 0 ? round3(ok.reduce((s, r) => s + r.cachedTokens, 0) / promptTokens) : 0,
    serverCacheReuse: serverCacheReuse(meta.serverCache),
    preemptions: meta.engines?.preemptions ?? null,
    adapterLoads: meta.engines?.adapterLoads ?? null,
    adapterLoadsPer1k: meta.engines === undefined || records.length === 0 ? null : round3((meta.engines.adapterLoads / records.length) * 1000),
    ttftCdf: cdf(ttft),
    ttftTimeline: timeline(records, timelineWindowS(meta.durationS), meta.deadlineMs),
    admission: admissionSummary(records, meta.deadlineMs, meta.step),
    ttftSlo: sloShares(records, meta.deadlineMs),
  };
}

/** Relative change of `value` against `base`, e.g. -0.93; null when undefined. */
export function relativeChange(value: number | undefined, base: number | undefined): number | null {
  if (value === undefined || base === undefined || !(base > 0)) return null;
  return value / base - 1;
}

/** "-93%", "+8.0%", "-99.7%", "~0%" (under half a percent): a decimal where whole percents would hide the difference. */
export function formatChange(change: number | null): string {
  if (change === null) return "n/a";
  const pct = change * 100;
  if (Math.abs(pct) < 0.5) return "~0%";
  const digits = Math.abs(pct) < 10 || (pct <= -95 && pct > -100) ? 1 : 0;
  return `${pct > 0 ? "+" : ""}${pct.toFixed(digits)}%`;
}
