// A pool's drain and its booked retries, and the one estimate of a new
// request's wait that holding, refusing and Retry-After all use
// (core/scheduling/admission.ts says how).

/** Each request's weight in the typical prompt share (about the last 50 requests). */
const SHARE_WEIGHT: f64 = 0.02;
/** Time constant of the drain rate: long enough to smooth bursts, short enough to follow a step. */
const DRAIN_WINDOW_MS: f64 = 10_000;
/** Below this many completions a second a worker has too few to measure... */
const MIN_MEASURED_RATE: f64 = 0.1;
/** ...and assumes a pod finishes one request a second. */
const FALLBACK_RATE_PER_POD: f64 = 1;

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

/** Most retries a worker keeps booked per pool; past it the soonest due is forgotten (it is nearly back). */
const MAX_BOOKED: i32 = 1024;

/**
 * One worker's bookkeeping for a pool: its measured completions and the
 * retries it has told refused clients to make. A new request waits for
 * what is held ahead of it and for the retries booked to come back before
 * its turn (a retry that comes back as told goes ahead of new work), all
 * drained at the pool's rate: every worker's and replica's completions (the
 * caller adds the others' to this worker's). A refused request is told to
 * come back at its turn at that rate, so Retry-After follows the load.
 */
export class PoolLoad {
  /**
   * The pool's typical prompt as a share of a prefill step (an average over
   * its recent requests): admission judges every class's queue by it, so
   * the class ladder holds whatever one request's own size.
   */
  typicalShare: f64 = 0;
  private drain: Rate = new Rate(DRAIN_WINDOW_MS);
  /** When each booked retry is due back, soonest first. */
  private dues: f64[] = [];

  /** A request for the pool arrived, its prompt `share` of a prefill step. */
  observeShare(share: f64): void {
    this.typicalShare = this.typicalShare == 0 ? share : this.typicalShare + SHARE_WEIGHT * (share - this.typicalShare);
  }

  /** A pod answered a request this worker routed to the pool. */
  completed(nowMs: u64): void {
    this.drain.add(nowMs);
  }

  /** This worker's completions per second, or the fallback for `pods` pods before enough were seen. */
  drainRate(nowMs: u64, pods: i32): f64 {
    const rate = this.drain.perSecond(nowMs);
    return rate >= MIN_MEASURED_RATE ? rate : FALLBACK_RATE_PER_POD * <f64>max(pods, 1);
  }

  /** Retries booked and not yet due back. */
  booked(nowMs: u64): i32 {
    this.forgetDue(nowMs);
    return this.dues.length;
  }

  /**
   * Ms until a new request's turn: `ahead` held requests served before it,
   * and the booked retries due back before that turn (a retry due later
   * comes after it), drained at `poolDrain` a second.
   */
  waitMs(nowMs: u64, ahead: i32, poolDrain: f64): f64 {
    this.forgetDue(nowMs);
    // The turn and the retries due before it settle together: each retry
    // counted moves the turn later, which may take in the next; at most one
    // step per booked retry, and the count only grows.
    const dues = this.dues;
    let counted = 0;
    let waitMs = <f64>ahead * 1000 / poolDrain;
    // A retry due within a millisecond of the turn was refused first: it goes ahead.
    while (counted < dues.length && unchecked(dues[counted]) <= <f64>nowMs + waitMs + 1) {
      counted++;
      waitMs = <f64>(ahead + counted) * 1000 / poolDrain;
    }
    return waitMs;
  }

  /**
   * Books a refused request's retry and returns its Retry-After in seconds,
   * 1..maxS: its own turn, after the `ahead` held requests and the retries
   * due back before it, at `poolDrain` a second.
   */
  refuse(nowMs: u64, ahead: i32, poolDrain: f64, maxS: u32): u32 {
    const turnMs = this.waitMs(nowMs, ahead + 1, poolDrain);
    const capMs = <f64>maxS * 1000;
    // Its place in line is its turn, or the cap when it is told to come back sooner (it then waits held).
    this.book(<f64>nowMs + (turnMs < capMs ? turnMs : capMs));
    return turnMs >= capMs ? maxS : max<u32>(1, <u32>Math.ceil(turnMs / 1000));
  }

  /** Keeps `dues` in order, the soonest first; when full, the soonest (nearly back) makes room. */
  private book(dueMs: f64): void {
    const dues = this.dues;
    if (dues.length >= MAX_BOOKED) dues.shift();
    let i = dues.length;
    dues.push(dueMs);
    while (i > 0 && unchecked(dues[i - 1]) > dueMs) {
      unchecked(dues[i] = dues[i - 1]);
      i--;
    }
    unchecked(dues[i] = dueMs);
  }

  /** Retries due by now are back (held, admitted) or given up: they no longer wait ahead of anyone. */
  private forgetDue(nowMs: u64): void {
    const dues = this.dues;
    let k = 0;
    while (k < dues.length && unchecked(dues[k]) <= <f64>nowMs) k++;
    if (k == 0) return;
    dues.copyWithin(0, k);
    dues.length -= k;
  }
}
