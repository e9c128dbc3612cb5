// Whether a memory series levels off. The rule, stated once and applied to
// Envoy's RSS, the aggregator's RSS and the filter's Wasm memory alike:
//
//   the series' highest sample in the second half of the run may exceed its
//   highest sample in the first half by at most LEVEL_RISE_SHARE of the
//   latter (LEVEL_RISE_FLOOR_BYTES at least, for a series so small that the
//   share is below it).
//
// The high-water mark, not a fitted slope: the aggregator is a Node process
// whose RSS climbs for minutes between major garbage collections and then
// drops (measured here: 78 -> 109 MiB over five minutes, twice in ten), so a
// line fitted to half a run can catch one climb of a bounded sawtooth. Its
// peaks repeat while nothing leaks; a leak raises them, as it raises every
// sample of a series that never shrinks (Envoy's RSS, Wasm memory, which
// only grows). The start-up climb is over within the first minute, well
// inside the first half. The second half's slope is still reported.
import type { MemorySample } from "./memory.js";

export const LEVEL_RISE_SHARE = 0.02;
export const LEVEL_RISE_FLOOR_BYTES = 256 * 1024;
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
  /** Least-squares slope over the second half. */
  secondHalfSlopeBytesPerMin: number | null;
  firstHalfPeakBytes: number | null;
  secondHalfPeakBytes: number | null;
  /** The most the second half's peak may exceed the first half's. */
  allowedRiseBytes: number | null;
  levelsOff: boolean | null;
}

interface Point {
  tMs: number;
  v: number;
}

const mean = (xs: number[]): number | null => (xs.length === 0 ? null : xs.reduce((a, b) => a + b, 0) / xs.length);
const peak = (xs: number[]): number | null => (xs.length === 0 ? null : Math.max(...xs));

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

/** `endMs`: the end of the run (the last sample may be a little later). */
export function trendOf(samples: readonly MemorySample[], series: SeriesName, endMs: number): Trend {
  const points: Point[] = samples.flatMap((s) => (s[series] === null ? [] : [{ tMs: s.tMs, v: s[series]! }]));
  const values = (from: number, to: number) => points.filter((p) => p.tMs >= from && p.tMs < to).map((p) => p.v);
  const half = endMs / 2;
  const perMs = slope(points.filter((p) => p.tMs >= half));
  const firstPeak = peak(values(0, half));
  const secondPeak = peak(values(half, Infinity));
  const allowed = firstPeak === null ? null : Math.max(LEVEL_RISE_SHARE * firstPeak, LEVEL_RISE_FLOOR_BYTES);
  return {
    series,
    samples: points.length,
    peakBytes: peak(points.map((p) => p.v)),
    firstMinuteMeanBytes: mean(values(0, MINUTE_MS)),
    lastMinuteMeanBytes: mean(values(endMs - MINUTE_MS, Infinity)),
    secondHalfSlopeBytesPerMin: perMs === null ? null : perMs * MINUTE_MS,
    firstHalfPeakBytes: firstPeak,
    secondHalfPeakBytes: secondPeak,
    allowedRiseBytes: allowed,
    levelsOff: firstPeak === null || secondPeak === null || allowed === null ? null : secondPeak - firstPeak <= allowed,
  };
}
