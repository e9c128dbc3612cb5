// Whether a memory series levels off. The rule, stated once and applied to
// Envoy's RSS, the aggregator's RSS and the filter's Wasm memory alike:
//
//   fit a least-squares line to the samples of the run's second half; the
//   series levels off when that line rises by at most LEVEL_SHARE_PER_MIN of
//   the series' second-half mean per minute, or by at most LEVEL_FLOOR_BYTES
//   per minute for a series so small that the share is below it.
//
// A leak grows with the traffic, steadily, and survives a fit over minutes;
// the start-up climb (caches, JIT, allocator arenas filling) is over by the
// second half; a garbage collector's sawtooth averages out in the fit. At the
// soak's 20-40 req/s, 1% a minute of Envoy's ~40 MB is a few hundred bytes
// per request.
import type { MemorySample } from "./memory.js";

export const LEVEL_SHARE_PER_MIN = 0.01;
export const LEVEL_FLOOR_BYTES = 256 * 1024;
/** The rule is judged (and can fail the run) only on runs at least this long. */
export const JUDGED_FROM_MS = 10 * 60_000;
const MINUTE_MS = 60_000;

export const SERIES = ["envoyRssBytes", "aggregatorRssBytes", "wasmBytes"] as const;
export type SeriesName = (typeof SERIES)[number];

export const SERIES_TITLES: Record<SeriesName, string> = {
  envoyRssBytes: "Envoy RSS",
  aggregatorRssBytes: "aggregator RSS",
  wasmBytes: "Wasm memory (filter, all VMs)",
};

export interface Trend {
  series: SeriesName;
  samples: number;
  peakBytes: number | null;
  firstMinuteMeanBytes: number | null;
  lastMinuteMeanBytes: number | null;
  secondHalfMeanBytes: number | null;
  /** Least-squares slope over the second half. */
  secondHalfSlopeBytesPerMin: number | null;
  /** The most the slope may be under the rule. */
  allowedSlopeBytesPerMin: number | null;
  levelsOff: boolean | null;
}

interface Point {
  tMs: number;
  v: number;
}

const mean = (xs: number[]): number | null => (xs.length === 0 ? null : xs.reduce((a, b) => a + b, 0) / xs.length);

/** Least-squares slope of v over t, per ms; null for fewer than two distinct times. */
export function slope(points: readonly Point[]): number | null {
  const mt = mean(points.map((p) => p.tMs));
  const mv = mean(points.map((p) => p.v));
  if (mt === null || mv === null) return null;
  let num = 0;
  let den = 0;
  for (const p of points) {
    num += (p.tMs - mt) * (p.v - mv);
    den += (p.tMs - mt) ** 2;
  }
  return den === 0 ? null : num / den;
}

/** `endMs`: the end of the run (the last sample may be a little earlier). */
export function trendOf(samples: readonly MemorySample[], series: SeriesName, endMs: number): Trend {
  const points: Point[] = samples.flatMap((s) => (s[series] === null ? [] : [{ tMs: s.tMs, v: s[series]! }]));
  const values = (from: number, to: number) => points.filter((p) => p.tMs >= from && p.tMs <= to).map((p) => p.v);
  const second = points.filter((p) => p.tMs >= endMs / 2);
  const perMs = slope(second);
  const secondMean = mean(second.map((p) => p.v));
  const slopePerMin = perMs === null ? null : perMs * MINUTE_MS;
  const allowed = secondMean === null ? null : Math.max(LEVEL_SHARE_PER_MIN * secondMean, LEVEL_FLOOR_BYTES);
  return {
    series,
    samples: points.length,
    peakBytes: points.length === 0 ? null : Math.max(...points.map((p) => p.v)),
    firstMinuteMeanBytes: mean(values(0, MINUTE_MS)),
    lastMinuteMeanBytes: mean(values(endMs - MINUTE_MS, endMs)),
    secondHalfMeanBytes: secondMean,
    secondHalfSlopeBytesPerMin: slopePerMin,
    allowedSlopeBytesPerMin: allowed,
    levelsOff: slopePerMin === null || allowed === null ? null : slopePerMin <= allowed,
  };
}
