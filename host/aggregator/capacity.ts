// Learns a pod's service rate from its inter-token latency histogram, the
// same way for every engine: the mean time between output tokens over the
// token gaps seen since the last update (Δsum / Δcount), smoothed; capacity
// = 1 / that mean, in tokens per second per sequence. It is published
// quantised, so a busy pod's jitter does not change the snapshot (pushed on
// change) on every scrape.
//
// The mean grows with the pod's own batch too (a step carries more
// sequences), so a busy pod reads somewhat slower than it is idle: the
// estimate is the speed a request would see there now, not the bare GPU's.
import type { ItlTotals } from "./normalise.js";

/** Fewer new token gaps than this are too few to average: they wait for the next scrape. */
export const MIN_OBSERVATIONS = 50;
/**
 * The smoothing's memory, in token gaps: older windows weigh e^(-gaps/this).
 * Long, because one prefill chunk stalls every running sequence for a step
 * many decode steps long, so short windows swing widely.
 */
export const MEMORY_OBSERVATIONS = 10_000;
/** The published value moves only once the estimate has moved more than this (relative) since it was published. */
export const HYSTERESIS = 0.05;

export class CapacityLearner {
  /** Totals at the last update: where the next window starts. */
  private base: ItlTotals | null = null;
  /** Smoothed seconds per token; null until a first window is complete. */
  private itlS: number | null = null;
  /** Token gaps folded into itlS so far. */
  private seen = 0;
  /** The unrounded estimate when `published` was set: the hysteresis band's centre. */
  private anchor = 0;
  private published = 0;

  /** Tokens per second per sequence, 2 significant digits; 0 = unknown. */
  get value(): number {
    return this.published;
  }

  /** Feeds one good scrape's totals; null (the engine exports none) teaches nothing. */
  observe(totals: ItlTotals | null): void {
    if (totals === null) return;
    const base = this.base;
    // First sight, or the counters went back (the server restarted): a new
    // window starts there, and the estimate stays.
    if (base === null || totals.count < base.count || totals.sumS < base.sumS) {
      this.base = totals;
      return;
    }
    const gaps = totals.count - base.count;
    // An idle pod keeps its estimate; a quiet one accumulates until enough gaps.
    if (gaps < MIN_OBSERVATIONS) return;
    this.base = totals;
    const mean = (totals.sumS - base.sumS) / gaps;
    if (!(mean > 0)) return;
    // Weighted by gaps, not scrapes, so the scrape interval does not change
    // the memory; a plain running mean until the memory has filled, so the
    // first windows do not count for more than later ones.
    const weight = Math.max(gaps / (this.seen + gaps), 1 - Math.exp(-gaps / MEMORY_OBSERVATIONS));
    this.seen += gaps;
    this.itlS = this.itlS === null ? mean : this.itlS + weight * (mean - this.itlS);
    const capacity = 1 / this.itlS;
    // Against the unrounded anchor: rounding alone must not make the value flip.
    if (this.published === 0 || Math.abs(capacity / this.anchor - 1) > HYSTERESIS) {
      this.anchor = capacity;
      this.published = Number(capacity.toPrecision(2));
    }
  }
}
