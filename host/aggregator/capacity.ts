// Learns a pod's service rate from its inter-token latency histogram, the
// same way for every engine: the mean time between output tokens over the
// token gaps seen since the last update (Δsum / Δcount), smoothed; capacity
// = 1 / that mean, in tokens per second per sequence. It is published
// quantised, so a busy pod's jitter does not change the snapshot (pushed on
// change) on every scrape.
//
// The mean grows with the pod's own batch too (a step carries more
// sequences), so each window's mean is corrected by the batch the pod ran
// meanwhile: a step costs about BATCH_OVERHEAD_SEQS sequences' decode before
// it decodes any, so ITL ~ (BATCH_OVERHEAD_SEQS + running) / speed. The
// estimate is the GPU's speed, alike for a busy and an idle pod of one kind;
// the load itself is what the scorers count (counting it here too made a
// pod's own batch weigh twice, and drove an adapter off the pod that ran it).
import type { ItlTotals } from "./normalise.js";

/** Fewer new token gaps than this are too few to average: they wait for the next scrape. */
export const MIN_OBSERVATIONS = 50;
/**
 * The smoothing's memory, in token gaps: older windows weigh e^(-gaps/this).
 * Long, because one prefill chunk stalls every running sequence for a step
 * many decode steps long, so short windows swing widely.
 */
export const MEMORY_OBSERVATIONS = 10_000;
/**
 * A decode step's fixed cost in sequences' decode: vLLM on an H100 steps
 * every ~10 ms plus ~0.1 ms per running sequence (reference profile of an
 * 8B model; the fake engine's defaults), so about 100.
 */
export const BATCH_OVERHEAD_SEQS = 100;
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
  /** Running sequences summed over the scrapes of the window being gathered, and how many. */
  private runningSum = 0;
  private scrapes = 0;

  /** Tokens per second per sequence, 2 significant digits; 0 = unknown. */
  get value(): number {
    return this.published;
  }

  /** Feeds one good scrape's totals and its running batch; null totals (the engine exports none) teach nothing. */
  observe(totals: ItlTotals | null, running = 0): void {
    if (totals === null) return;
    const base = this.base;
    // First sight, or the counters went back (the server restarted): a new
    // window starts there, and the estimate stays.
    if (base === null || totals.count < base.count || totals.sumS < base.sumS) {
      this.base = totals;
      this.runningSum = 0;
      this.scrapes = 0;
      return;
    }
    this.runningSum += running;
    this.scrapes++;
    const gaps = totals.count - base.count;
    // An idle pod keeps its estimate; a quiet one accumulates until enough gaps.
    if (gaps < MIN_OBSERVATIONS) return;
    this.base = totals;
    const batch = this.runningSum / this.scrapes;
    this.runningSum = 0;
    this.scrapes = 0;
    // The seconds per token this pod would take at a batch of one.
    const mean = (totals.sumS - base.sumS) / gaps / (1 + batch / BATCH_OVERHEAD_SEQS);
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
