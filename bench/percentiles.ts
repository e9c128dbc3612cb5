// Percentiles and latency summaries, shared by the run summaries (stats.ts)
// and the admission figures (admission.ts).
import type { LatencySummary } from "./types.js";

/** Linear interpolation between closest ranks (numpy's default); `sorted` ascending, non-empty. */
export function percentile(sorted: readonly number[], p: number): number {
  const pos = (sorted.length - 1) * p;
  const lo = Math.floor(pos);
  const hi = Math.min(lo + 1, sorted.length - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo);
}

/** The nearest-rank quantile (the smallest value at or above a `q` share of them); `sorted` ascending; NaN when empty. */
export function nearestRank(sorted: ArrayLike<number>, q: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))];
}

/** Rounds to microseconds so results are compact and print the same everywhere. */
export const round3 = (x: number) => Math.round(x * 1000) / 1000;

export function latencySummary(values: readonly number[]): LatencySummary | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const mean = sorted.reduce((s, v) => s + v, 0) / sorted.length;
  return {
    p50: round3(percentile(sorted, 0.5)),
    p95: round3(percentile(sorted, 0.95)),
    p99: round3(percentile(sorted, 0.99)),
    mean: round3(mean),
    max: round3(sorted[sorted.length - 1]),
  };
}

