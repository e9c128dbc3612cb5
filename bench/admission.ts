/**
 * Admission figures of one policy's run, from its request records:
 * refusals and retries per class, Critical refused while Sheddable was
 * admitted, TTFT from first arrival over time, and how it behaves through a load
 * step and after it. Every policy gets them, so a baseline that never
 * refuses sits in the same table as ours.
 *
 * An attempt is one pass through the gateway: the first, and the retry of a
 * refused one. Admitted attempts are those sent to a pod. Latencies count
 * as everywhere in the results: every request from its first arrival, one
 * that failed at the run's deadline.
 */
import type { Scenario } from "./scenario.js";
import { latencySummary, percentile, round3 } from "./percentiles.js";
import {
  isMeasured,
  isRefusal,
  lastArrivalMs,
  PRIORITIES,
  ttftFromArrival,
  ttftOf,
  type Priority,
  type RunRecord,
  type LatencySummary,
} from "./types.js";

/** A scenario's load step: base load first, then a higher rate for a while (times in s). */
export interface LoadStep {
  baseEndS: number;
  stepStartS: number;
  stepEndS: number;
}

export interface ClassCounts {
  requests: number;
  /** First attempts answered 429. */
  refused: number;
  /** Refused requests sent again after their Retry-After. */
  retried: number;
  /** Retries admitted and completed. */
  retriedCompleted: number;
  /** Refused for good: on the retry too, or with no Retry-After to obey. */
  finalRefused: number;
}

export interface StepSummary extends LoadStep {
  /** p95 TTFT (from first arrival, failures at the deadline) of the requests that arrived at base load (before the step). */
  baseP95Ms: number | null;
  /** The highest p95 of a window that starts within the step, and its ratio to the base's. */
  stepPeakP95Ms: number | null;
  stepPeakRatio: number | null;
  /**
   * How long after the step's end the first window whose p95 is back within
   * RECOVERED_WITHIN of the base's starts (0: the first window after the
   * step already is); null if none is.
   */
  recoveryS: number | null;
  /** 429s (every attempt) before the step, during it, and after its end. */
  refusalsBefore: number;
  refusalsDuring: number;
  refusalsAfter: number;
  /** Of those after the step, the first attempts' (the rest are retries of earlier refusals). */
  refusalsAfterFirstAttempts: number;
}

export interface AdmissionSummary {
  byClass: Record<Priority, ClassCounts>;
  total: ClassCounts;
  /** retriedCompleted / retried; null without retries. */
  retrySuccess: number | null;
  /** Critical refusals (any attempt) in a 1-s window (of the run's clock) in which some Sheddable attempt was admitted. */
  criticalWhileSheddable: number;
  /** The Retry-After values given to first attempts, in seconds. */
  retryAfterS: { min: number; p50: number; max: number } | null;
  /** Retried requests that completed: TTFT from the retry, and from the first attempt (what their user waited). */
  retriedTtftMs: { fromRetry: LatencySummary; fromFirstAttempt: LatencySummary } | null;
  /** TTFT per class, as PolicyResult.ttftMs counts it. */
  ttftByClass: Record<Priority, LatencySummary | null>;
  /** p95 TTFT per WINDOW_S window of first arrival, as PolicyResult.ttftMs counts it. */
  windows: Array<{ t: number; n: number; p95: number }>;
  /** 429s per second (every attempt), the seconds that had any. */
  refusalsPerS: Array<{ t: number; n: number }>;
  step: StepSummary | null;
}

/** Windows of p95 TTFT. */
export const WINDOW_S = 5;
/** A window's p95 within this factor of the base load's counts as recovered. */
export const RECOVERED_WITHIN = 1.25;

/**
 * The load step of a scenario whose arrivals are phases run once (their
 * cycle covers the whole duration), the first phase being the base load and
 * the busiest later phase the step; undefined for any other shape.
 */
export function loadStep(scenario: Pick<Scenario, "arrivals" | "durationS">): LoadStep | undefined {
  const a = scenario.arrivals;
  if (a.pattern !== "phases" || a.phases.length < 2) return undefined;
  const cycle = a.phases.reduce((s, p) => s + p.durationS, 0);
  if (cycle < scenario.durationS) return undefined;
  let start = 0;
  let step: LoadStep | undefined;
  let busiest = a.phases[0].rate;
  for (const p of a.phases) {
    if (p.rate > busiest) {
      busiest = p.rate;
      step = { baseEndS: a.phases[0].durationS, stepStartS: start, stepEndS: start + p.durationS };
    }
    start += p.durationS;
  }
  return step;
}

interface Attempt {
  atMs: number;
  retry: boolean;
  priority: Priority;
  refused: boolean;
  /** Sent to a pod. */
  admitted: boolean;
}

/** Whether the last attempt reached a pod: a gateway answer (429, 404, 503...) has no pod and no latency. */
function lastAdmitted(r: RunRecord): boolean {
  return !isRefusal(r.error) && (isMeasured(r) || r.servedBy !== null);
}

function attempts(r: RunRecord): Attempt[] {
  const refusal = r.firstRefusal;
  if (!refusal) return [{ atMs: r.atMs, retry: false, priority: r.priority, refused: false, admitted: lastAdmitted(r) }];
  const retries = refusal.retryArrivalsMs;
  const first: Attempt = { atMs: r.atMs, retry: false, priority: r.priority, refused: true, admitted: false };
  return [first, ...retries.map((atMs, i): Attempt => {
    const last = i === retries.length - 1;
    return { atMs, retry: true, priority: r.priority, refused: !last || isRefusal(r.error), admitted: last && lastAdmitted(r) };
  })];
}

const emptyCounts = (): ClassCounts => ({ requests: 0, refused: 0, retried: 0, retriedCompleted: 0, finalRefused: 0 });

function classCounts(records: readonly RunRecord[]): { byClass: Record<Priority, ClassCounts>; total: ClassCounts } {
  const byClass = Object.fromEntries(PRIORITIES.map((p) => [p, emptyCounts()])) as Record<Priority, ClassCounts>;
  const total = emptyCounts();
  for (const r of records) {
    for (const c of [byClass[r.priority], total]) {
      c.requests++;
      if (r.firstRefusal === undefined) continue;
      c.refused++;
      if (r.firstRefusal.retryArrivalsMs.length > 0) c.retried++;
      if (r.firstRefusal.retryArrivalsMs.length > 0 && r.error === undefined) c.retriedCompleted++;
      if (isRefusal(r.error)) c.finalRefused++;
    }
  }
  return { byClass, total };
}

/** Critical refusals in a second of the run in which a Sheddable attempt got in. */
export function criticalWhileSheddable(records: readonly RunRecord[]): number {
  const all = records.flatMap(attempts);
  const sheddableIn = new Set(all.filter((a) => a.priority === "sheddable" && a.admitted).map((a) => Math.floor(a.atMs / 1000)));
  return all.filter((a) => a.priority === "critical" && a.refused && sheddableIn.has(Math.floor(a.atMs / 1000))).length;
}

function p95(values: number[]): number | null {
  if (values.length === 0) return null;
  values.sort((a, b) => a - b);
  return round3(percentile(values, 0.95));
}

/** p95 TTFT per window of `windowS` of first arrival, failures at the deadline. */
export function ttftWindows(records: readonly RunRecord[], deadlineMs: number, windowS = WINDOW_S): AdmissionSummary["windows"] {
  const buckets = new Map<number, number[]>();
  for (const r of records) {
    const ttft = ttftFromArrival(r, deadlineMs);
    const w = Math.floor(r.atMs / 1000 / windowS);
    let b = buckets.get(w);
    if (!b) buckets.set(w, (b = []));
    b.push(ttft);
  }
  return [...buckets.entries()].sort((a, b) => a[0] - b[0]).map(([w, values]) => ({ t: w * windowS, n: values.length, p95: p95(values)! }));
}

function refusals(records: readonly RunRecord[]): Attempt[] {
  return records.flatMap(attempts).filter((a) => a.refused);
}

/** The step's figures from the windows: the base p95, the peak within the step, and when the p95 came back. */
export function stepSummary(records: readonly RunRecord[], deadlineMs: number, windows: AdmissionSummary["windows"], step: LoadStep): StepSummary {
  const base = p95(records.filter((r) => r.atMs < step.baseEndS * 1000).map((r) => ttftFromArrival(r, deadlineMs)));
  const during = windows.filter((w) => w.t >= step.stepStartS && w.t < step.stepEndS);
  const peak = during.length > 0 ? Math.max(...during.map((w) => w.p95)) : null;
  const back = base === null ? undefined : windows.find((w) => w.t >= step.stepEndS && w.p95 <= RECOVERED_WITHIN * base);
  const refused = refusals(records);
  const after = refused.filter((a) => a.atMs >= step.stepEndS * 1000);
  return {
    ...step,
    baseP95Ms: base,
    stepPeakP95Ms: peak,
    stepPeakRatio: peak !== null && base !== null && base > 0 ? round3(peak / base) : null,
    recoveryS: back === undefined ? null : back.t - step.stepEndS,
    refusalsBefore: refused.filter((a) => a.atMs < step.stepStartS * 1000).length,
    refusalsDuring: refused.filter((a) => a.atMs >= step.stepStartS * 1000 && a.atMs < step.stepEndS * 1000).length,
    refusalsAfter: after.length,
    refusalsAfterFirstAttempts: after.filter((a) => !a.retry).length,
  };
}

export function admissionSummary(records: readonly RunRecord[], deadlineMs: number, step?: LoadStep): AdmissionSummary {
  const { byClass, total } = classCounts(records);
  const given = records.flatMap((r) => (typeof r.firstRefusal?.retryAfterS === "number" ? [r.firstRefusal.retryAfterS] : [])).sort((a, b) => a - b);
  const retriedOk = records.filter((r) => (r.firstRefusal?.retryArrivalsMs.length ?? 0) > 0 && r.error === undefined);
  const fromRetry = latencySummary(retriedOk.map(ttftOf));
  const fromFirstAttempt = latencySummary(retriedOk.map((r) => lastArrivalMs(r) - r.atMs + ttftOf(r)));
  const perSecond = new Map<number, number>();
  for (const { atMs } of refusals(records)) perSecond.set(Math.floor(atMs / 1000), (perSecond.get(Math.floor(atMs / 1000)) ?? 0) + 1);
  const windows = ttftWindows(records, deadlineMs);
  const ttftByClass = Object.fromEntries(
    PRIORITIES.map((c) => [c, latencySummary(records.filter((r) => r.priority === c).map((r) => ttftFromArrival(r, deadlineMs)))]),
  ) as Record<Priority, LatencySummary | null>;
  return {
    byClass,
    total,
    retrySuccess: total.retried > 0 ? round3(total.retriedCompleted / total.retried) : null,
    criticalWhileSheddable: criticalWhileSheddable(records),
    retryAfterS: given.length > 0 ? { min: given[0], p50: percentile(given, 0.5), max: given[given.length - 1] } : null,
    retriedTtftMs: fromRetry && fromFirstAttempt ? { fromRetry, fromFirstAttempt } : null,
    ttftByClass,
    windows,
    refusalsPerS: [...perSecond.entries()].sort((a, b) => a[0] - b[0]).map(([t, n]) => ({ t, n })),
    step: step ? stepSummary(records, deadlineMs, windows, step) : null,
  };
}
