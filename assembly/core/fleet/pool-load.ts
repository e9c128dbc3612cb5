// One worker's drain and refusal bookkeeping for a pool, from which a refused
// request's Retry-After is computed (core/scheduling/admission.ts says how).

/** Each request's weight in the typical prompt share (about the last 50 requests). */
const SHARE_WEIGHT: f64 = 0.02;
/** Time constant of the drain rate: long enough to smooth bursts, short enough to follow a step. */
const DRAIN_WINDOW_MS: f64 = 10_000;
/** Time constant of the pool's usual rate: what keeps arriving after an overload ends. */
const USUAL_WINDOW_MS: f64 = 60_000;
/** Below this many completions a second a worker has too few to measure... */
const MIN_MEASURED_RATE: f64 = 0.1;
/** ...and assumes a pod finishes one request a second. */
const FALLBACK_RATE_PER_POD: f64 = 1;
/**
 * At least this share of the drain is taken to be free for retries: the usual
 * rate is a minute's average, which a short burst's drain rate has not yet
 * risen above (without the floor, a burst's retries were told to wait minutes).
 */
const MIN_SPARE_SHARE: f64 = 0.5;

/** Events per second, exponentially weighted, corrected for the time it has been measuring (exact for a steady rate). */
class Rate {
  private weight: f64 = 0;
  private lastMs: u64 = 0;
  private firstMs: u64 = 0;

  constructor(private windowMs: f64) {}

  add(nowMs: u64): void {
    if (this.weight == 0 && this.firstMs == 0) this.firstMs = nowMs;
    this.weight = this.decayed(nowMs) + 1;
    this.lastMs = nowMs;
  }

  perSecond(nowMs: u64): f64 {
    if (this.firstMs == 0) return 0;
    const elapsed = <f64>max<u64>(nowMs > this.firstMs ? nowMs - this.firstMs : 0, 1000);
    return this.decayed(nowMs) * 1000 / (this.windowMs * (1 - Math.exp(-elapsed / this.windowMs)));
  }

  private decayed(nowMs: u64): f64 {
    if (nowMs <= this.lastMs) return this.weight;
    return this.weight * Math.exp(-<f64>(nowMs - this.lastMs) / this.windowMs);
  }
}

/**
 * One worker's view of how fast a pool drains and of the retries it has
 * booked. A refused request is told to come back when the retries booked
 * ahead of it have drained at the pool's spare rate: its drain rate less
 * the usual load it had before it saturated (that load keeps coming after an
 * overload, and retries only get what it leaves). While the pool stays
 * saturated nothing booked drains.
 */
export class PoolLoad {
  /**
   * The pool's typical prompt as a share of a prefill step (an average over
   * its recent requests): admission judges every class's queue by it, so
   * the class ladder holds whatever one request's own size.
   */
  typicalShare: f64 = 0;
  private drain: Rate = new Rate(DRAIN_WINDOW_MS);
  private usual: Rate = new Rate(USUAL_WINDOW_MS);
  /** Completions per second before the pool last saturated. */
  private baseline: f64 = 0;
  /** Retries booked and not yet drained. */
  booked: f64 = 0;
  private bookedMs: u64 = 0;
  /** The pool had no room for its lowest class at the last check: booked work is not draining. */
  saturated: bool = false;

  /** A request for the pool arrived, its prompt `share` of a prefill step. */
  observeShare(share: f64): void {
    this.typicalShare = this.typicalShare == 0 ? share : this.typicalShare + SHARE_WEIGHT * (share - this.typicalShare);
  }

  /** A pod answered a request this worker routed to the pool. */
  completed(nowMs: u64): void {
    this.drain.add(nowMs);
    this.usual.add(nowMs);
  }

  /** Completions per second, or the fallback for `pods` pods before enough were seen. */
  drainRate(nowMs: u64, pods: i32): f64 {
    const rate = this.drain.perSecond(nowMs);
    return rate >= MIN_MEASURED_RATE ? rate : FALLBACK_RATE_PER_POD * <f64>max(pods, 1);
  }

  /** The share of the drain left for retries once the usual load is served. */
  spareRate(nowMs: u64, pods: i32): f64 {
    const drain = this.drainRate(nowMs, pods);
    const spare = drain - this.baseline;
    return spare >= drain * MIN_SPARE_SHARE ? spare : drain * MIN_SPARE_SHARE;
  }

  /** The pool has room again: booked retries drain from now on. */
  markRoom(nowMs: u64, pods: i32): void {
    this.settle(nowMs, pods);
    this.saturated = false;
  }

  /** A retry took its booked place. */
  retried(): void {
    this.booked = this.booked > 1 ? this.booked - 1 : 0;
  }

  /**
   * Books a refused request's retry and returns its Retry-After in seconds,
   * 1..maxS: when the `held` requests the gateway holds ahead of it and the
   * retries booked before it will have drained at the spare rate.
   */
  refuse(nowMs: u64, pods: i32, maxS: u32, held: i32 = 0): u32 {
    this.settle(nowMs, pods);
    if (!this.saturated) {
      this.baseline = this.usual.perSecond(nowMs);
      this.saturated = true;
    }
    const seconds = Math.ceil((<f64>held + this.booked + 1) / this.spareRate(nowMs, pods));
    this.booked += 1;
    if (!(seconds >= 1)) return 1;
    return seconds >= <f64>maxS ? maxS : <u32>seconds;
  }

  /** Drains booked retries at the spare rate over the time since the last change, unless the pool was saturated. */
  private settle(nowMs: u64, pods: i32): void {
    if (!this.saturated && nowMs > this.bookedMs) {
      const drained = this.spareRate(nowMs, pods) * <f64>(nowMs - this.bookedMs) / 1000;
      this.booked = this.booked > drained ? this.booked - drained : 0;
    }
    this.bookedMs = nowMs;
  }
}
