// Candidates for the requests of a large pool. Scoring every endpoint on
// every request costs time in proportion to the pool, yet only a few can win:
// the least loaded, and those an affinity scorer favours. So what a snapshot
// fixes is computed once per snapshot (which pods are usable, their relative
// speeds, each load scorer's scale), and each usable pod's estimate (the
// load scorers' estimates at the pool's weights, for a typical request) sits
// in a max-tree updated only for the pods whose in-flight figures changed.
// A request is then scored exactly as before, but over the SHORTLIST best
// estimates, the LEADERS best by each load scorer's own estimate (the least
// loaded pod sets a ratio scorer's scale, min_j load_j / load_i, so it must be
// among the candidates for the scores to be the whole pool's), and the pods
// the affinity scorers nominate (prefix holders, adapter holders, an
// adapter's placement). Pools of up to FULL_SCAN usable pods are scored
// whole, in slot order, exactly as without a shortlist.
//
// Ties between estimates break by a per-worker salt, so workers (and
// gateways) that see an idle pool alike do not all shortlist the same pods.
import { relativeCapacities } from "./capacity";
import { NONE, ScoreTree } from "./score-tree";
import { sortPrefix } from "./sort";
import { InflightTable } from "../fleet/inflight";
import { Endpoint, Pool, prefillShare } from "../fleet/snapshot";
import { RouteRequest } from "../scorers/route-request";
import { Scorer } from "../scorers/scorer";
import { mix64 } from "../wire/hash";

/** Pools with at most this many usable endpoints are scored whole. */
export const FULL_SCAN: i32 = 32;
/** Endpoints a large pool's request is scored over by estimate, besides those nominated. */
export const SHORTLIST: i32 = 16;
/** Endpoints taken by each load scorer's own estimate. */
const LEADERS: i32 = 2;
/**
 * The estimates are redone when the pool's usual prompt moves this far (in
 * shares of a prefill step) from theirs, at most once per SHARE_WAIT_MS
 * (snapshots redo them anyway, and the usual prompt moves slowly once the
 * pool has seen traffic).
 */
const SHARE_DRIFT: f64 = 0.05;
const SHARE_WAIT_MS: u64 = 1000;
/** The prompt a pod's estimate is judged for until the pool has seen its own (512 tokens: a chat turn with some context). */
const TYPICAL_PROMPT_TOKENS: f64 = 512;

export class Shortlist {
  private pool: Pool | null = null;
  private table: InflightTable | null = null;
  private healthEpoch: u32 = 0;
  private tableEpoch: u32 = 0;
  /** How much of the table's change log has been applied. */
  private applied: i32 = 0;
  /** When the next ejection ends (a pod becomes usable again). */
  private rebuildMs: u64 = u64.MAX_VALUE;
  /** Before this, a drift of the usual prompt waits for the next snapshot. */
  private shareWaitMs: u64 = 0;
  /** Endpoints with fresh metrics that are not ejected. */
  usable: i32 = 0;
  /** Per slot: capacity relative to the fastest usable endpoint (core/scheduling/capacity.ts). */
  capacity: StaticArray<f64> = new StaticArray<f64>(0);
  private ties: StaticArray<u64> = new StaticArray<u64>(0);
  /** The weighted sum of the estimates, per slot. */
  private combined: ScoreTree = new ScoreTree(SHORTLIST);
  /** Per scorer: its own estimate, per slot (kept for the weighed scorers that estimate). */
  private own: ScoreTree[] = [];
  /** Per scorer: the pool's weight over the largest estimate at the last rebuild, so each weighs as its score would. */
  private factor: StaticArray<f64>;
  private typical: RouteRequest = new RouteRequest();
  private stamp: StaticArray<u32> = new StaticArray<u32>(0);
  private generation: u32 = 0;
  private nominated: i32[] = [];
  private taken: i32[] = [];

  constructor(private scorers: Scorer[], private salt: u64) {
    this.factor = new StaticArray<f64>(scorers.length);
    for (let s = 0; s < scorers.length; s++) this.own.push(new ScoreTree(LEADERS));
    this.typical.capacity = new StaticArray<f64>(1);
  }

  /**
   * Brings the pool's in-flight figures (and estimates) up to date with
   * `inflight`: in full for a new snapshot, a change in what is usable or a
   * restarted change log; otherwise only the endpoints logged as changed.
   * `weights` are the pool's, in the scorers' order.
   */
  observe(pool: Pool, inflight: InflightTable, nowMs: u64, weights: StaticArray<f64>): void {
    let stale = this.pool !== pool || this.table !== inflight || this.healthEpoch != pool.healthEpoch ||
      this.tableEpoch != inflight.epoch || nowMs >= this.rebuildMs;
    if (!stale && nowMs >= this.shareWaitMs && abs(usualShare(pool) - this.typical.prefillShare) > SHARE_DRIFT) {
      this.shareWaitMs = nowMs + SHARE_WAIT_MS;
      stale = true;
    }
    if (stale) {
      this.rebuild(pool, inflight, nowMs, weights);
      return;
    }
    const changes = inflight.changes;
    const endpoints = pool.endpoints;
    for (let i = this.applied; i < changes.length; i++) {
      const slot = pool.slots.get(unchecked(changes[i]));
      if (slot < 0) continue;
      const e = unchecked(endpoints[slot]);
      copyFigures(e, inflight);
      this.update(slot, e, nowMs);
    }
    this.applied = changes.length;
  }

  /**
   * Fills `out` with the request's candidates: the usable endpoints with
   * the best estimates and those the weighed scorers nominate, in slot
   * order; `request.capacity` gets their relative capacities. Returns how many.
   */
  gather(pool: Pool, request: RouteRequest, weights: StaticArray<f64>, out: Endpoint[]): i32 {
    out.length = 0;
    const endpoints = pool.endpoints;
    this.nextGeneration();
    const taken = this.taken;
    taken.length = 0;
    this.combined.take(taken, this.stamp, this.generation);
    for (let s = 0; s < this.scorers.length; s++) {
      if (unchecked(this.factor[s]) > 0) unchecked(this.own[s]).take(taken, this.stamp, this.generation);
    }
    const nominated = this.nominated;
    nominated.length = 0;
    const scorers = this.scorers;
    for (let s = 0; s < scorers.length; s++) {
      if (unchecked(weights[s]) > 0) unchecked(scorers[s]).nominate(pool, request, nominated);
    }
    for (let i = 0; i < nominated.length; i++) {
      const slot = unchecked(nominated[i]);
      if (unchecked(this.stamp[slot]) == this.generation || !isUsable(unchecked(endpoints[slot]), request.nowMs)) continue;
      unchecked(this.stamp[slot] = this.generation);
      taken.push(slot);
    }
    sortPrefix(taken, taken.length);
    const n = taken.length;
    if (request.capacity.length < n) request.capacity = new StaticArray<f64>(max(n, SHORTLIST * 2));
    for (let i = 0; i < n; i++) {
      const slot = unchecked(taken[i]);
      out.push(unchecked(endpoints[slot]));
      unchecked(request.capacity[i] = this.capacity[slot]);
    }
    return n;
  }

  /** Every figure read from the table afresh, usable endpoints and their capacities found, estimates rescaled. */
  private rebuild(pool: Pool, inflight: InflightTable, nowMs: u64, weights: StaticArray<f64>): void {
    this.pool = pool;
    this.table = inflight;
    this.healthEpoch = pool.healthEpoch;
    this.tableEpoch = inflight.epoch;
    this.applied = inflight.changes.length;
    this.rebuildMs = u64.MAX_VALUE;
    const endpoints = pool.endpoints;
    const n = endpoints.length;
    this.size(n);
    const usable: Endpoint[] = [];
    for (let i = 0; i < n; i++) {
      const e = unchecked(endpoints[i]);
      copyFigures(e, inflight);
      unchecked(this.ties[i] = mix64(e.addressHash ^ this.salt));
      if (e.ejectedUntilMs > nowMs && e.ejectedUntilMs < this.rebuildMs) this.rebuildMs = e.ejectedUntilMs;
      if (isUsable(e, nowMs)) usable.push(e);
    }
    this.usable = usable.length;
    for (let i = 0; i < n; i++) unchecked(this.capacity[i] = 1.0);
    if (usable.length > 1) {
      const relative = new StaticArray<f64>(usable.length);
      relativeCapacities(usable, relative, new StaticArray<f64>(usable.length));
      for (let i = 0; i < usable.length; i++) unchecked(this.capacity[unchecked(usable[i]).slot] = relative[i]);
    }
    const scorers = this.scorers;
    const typical = this.typical;
    // Estimates are judged for the pool's usual prompt as of now (keys must stay comparable until the next rebuild).
    typical.prefillShare = usualShare(pool);
    for (let s = 0; s < scorers.length; s++) {
      const scorer = unchecked(scorers[s]);
      let largest = 0.0;
      for (let i = 0; i < usable.length; i++) {
        const e = unchecked(usable[i]);
        unchecked(typical.capacity[0] = this.capacity[e.slot]);
        largest = max(largest, scorer.estimate(e, typical));
      }
      unchecked(this.factor[s] = largest > 0 ? unchecked(weights[s]) / largest : 0);
    }
    this.combined.reset(n, this.ties);
    for (let s = 0; s < scorers.length; s++) unchecked(this.own[s]).reset(unchecked(this.factor[s]) > 0 ? n : 0, this.ties);
    for (let i = 0; i < n; i++) this.update(i, unchecked(endpoints[i]), nowMs, false);
    this.combined.build();
    for (let s = 0; s < scorers.length; s++) unchecked(this.own[s]).build();
  }

  /**
   * Sets the slot's keys from the endpoint's figures now: its estimates if
   * usable, else the lowest; without `reorder` the trees are rebuilt after.
   */
  private update(slot: i32, e: Endpoint, nowMs: u64, reorder: bool = true): void {
    const usable = isUsable(e, nowMs);
    const typical = this.typical;
    unchecked(typical.capacity[0] = this.capacity[slot]);
    const scorers = this.scorers;
    let sum = 0.0;
    for (let s = 0; s < scorers.length; s++) {
      const f = unchecked(this.factor[s]);
      if (f == 0) continue;
      const estimate = usable ? unchecked(scorers[s]).estimate(e, typical) : NONE;
      unchecked(this.own[s]).set(slot, estimate, reorder);
      sum += f * estimate;
    }
    this.combined.set(slot, usable ? sum : NONE, reorder);
  }

  private size(n: i32): void {
    if (this.ties.length < n) {
      this.ties = new StaticArray<u64>(n);
      this.capacity = new StaticArray<f64>(n);
      this.stamp = new StaticArray<u32>(n);
      this.generation = 0;
    }
  }

  private nextGeneration(): void {
    this.generation++;
    if (this.generation == 0) {
      for (let i = 0; i < this.stamp.length; i++) unchecked(this.stamp[i] = 0);
      this.generation = 1;
    }
  }
}

/** The share of a prefill step of the pool's usual prompt, as this worker has seen them. */
function usualShare(pool: Pool): f64 {
  const load = pool.load;
  return load != null && load.typicalShare > 0 ? load.typicalShare : prefillShare(TYPICAL_PROMPT_TOKENS);
}

/** Fresh metrics and not ejected: what a trusted pick may choose. */
export function isUsable(e: Endpoint, nowMs: u64): bool {
  return e.fresh && e.ejectedUntilMs <= nowMs;
}

/** The endpoint's in-flight figures as `inflight` has them now. */
function copyFigures(e: Endpoint, inflight: InflightTable): void {
  e.inflight = inflight.get(e.addressHash);
  e.prefilling = inflight.prefillingOf(e.addressHash);
  e.prefillTokens = inflight.prefillTokensOf(e.addressHash);
}
