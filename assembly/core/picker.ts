// Ranks a pool's endpoints by their weighted score sum and keeps the best few:
// the first is where the request goes, the rest are fallbacks Envoy tries in
// order if that one refuses or fails before answering. Ties break at random.
// Scratch arrays are reused across requests so a pick allocates nothing once
// they have grown to the pool size.
import { relativeCapacities } from "./capacity";
import { PrefixIndex } from "./prefix-index";
import { RouteRequest } from "./route-request";
import { KvCacheScorer } from "./scorers/kv-cache";
import { LoraScorer } from "./scorers/lora";
import { PrefixScorer } from "./scorers/prefix";
import { QueueScorer } from "./scorers/queue";
import { RunningScorer } from "./scorers/running";
import { Scorer } from "./scorers/scorer";
import { Endpoint, Pool } from "./snapshot";

/** Primary plus fallbacks; matches the retry budget of the Envoy route (2 retries). */
export const MAX_RANKED = 3;

export class Picker {
  private scorers: Scorer[];
  private candidates: Endpoint[] = [];
  private totals: StaticArray<f64> = new StaticArray<f64>(0);
  private scratch: StaticArray<f64> = new StaticArray<f64>(0);
  private rng: u64;
  /** The last pick, best first: at most MAX_RANKED endpoints. */
  readonly ranked: Endpoint[] = [];

  constructor(seed: u64, prefixes: PrefixIndex) {
    this.rng = seed == 0 ? 0x9e3779b97f4a7c15 : seed;
    this.scorers = [new QueueScorer(), new KvCacheScorer(), new RunningScorer(), new LoraScorer(prefixes), new PrefixScorer(prefixes)];
  }

  /** Fills `ranked`; false only when the pool has no endpoints at all. */
  pick(pool: Pool, request: RouteRequest): bool {
    const ranked = this.ranked;
    ranked.length = 0;
    const n = this.collectCandidates(pool, request.nowMs);
    if (n == 0) return false;
    if (n == 1) {
      ranked.push(unchecked(this.candidates[0]));
      return true;
    }
    this.ensureCapacity(n);
    this.ensureRequestCapacity(request, n);
    relativeCapacities(this.candidates, request.capacity, this.scratch);
    const totals = this.totals;
    for (let i = 0; i < n; i++) unchecked(totals[i] = 0);
    for (let s = 0; s < this.scorers.length; s++) {
      const scorer = unchecked(this.scorers[s]);
      const w = scorer.weight(pool.weights);
      if (w == 0) continue;
      scorer.score(this.candidates, request, this.scratch);
      for (let i = 0; i < n; i++) unchecked(totals[i] += w * unchecked(this.scratch[i]));
    }
    const keep = min(n, MAX_RANKED);
    for (let k = 0; k < keep; k++) {
      const best = this.argmax(n);
      ranked.push(unchecked(this.candidates[best]));
      unchecked(totals[best] = -f64.MAX_VALUE);
    }
    return true;
  }

  /**
   * Usable endpoints: fresh metrics and not ejected. If none is, the ones not
   * ejected, then all of them: with nothing better to go on, Envoy's retries
   * and outlier detection are the last line (fail open within the pool).
   */
  private collectCandidates(pool: Pool, nowMs: u64): i32 {
    const all = pool.endpoints;
    const c = this.candidates;
    c.length = 0;
    for (let i = 0; i < all.length; i++) {
      const e = unchecked(all[i]);
      if (e.fresh && e.ejectedUntilMs <= nowMs) c.push(e);
    }
    if (c.length == 0) {
      for (let i = 0; i < all.length; i++) {
        const e = unchecked(all[i]);
        if (e.ejectedUntilMs <= nowMs) c.push(e);
      }
    }
    if (c.length == 0) for (let i = 0; i < all.length; i++) c.push(unchecked(all[i]));
    return c.length;
  }

  /** Index of the best total; ties resolved uniformly at random (reservoir). */
  private argmax(n: i32): i32 {
    let best = 0;
    let bestScore = unchecked(this.totals[0]);
    let ties = 1;
    for (let i = 1; i < n; i++) {
      const t = unchecked(this.totals[i]);
      if (t > bestScore + 1e-9) {
        best = i;
        bestScore = t;
        ties = 1;
      } else if (t >= bestScore - 1e-9) {
        ties++;
        if (this.nextRandom() % <u64>ties == 0) best = i;
      }
    }
    return best;
  }

  private ensureCapacity(n: i32): void {
    if (this.totals.length >= n) return;
    this.totals = new StaticArray<f64>(n);
    this.scratch = new StaticArray<f64>(n);
  }

  private ensureRequestCapacity(request: RouteRequest, n: i32): void {
    if (request.capacity.length < n) request.capacity = new StaticArray<f64>(n);
  }

  /** xorshift64*: deterministic for a seed, no host import needed. */
  private nextRandom(): u64 {
    let x = this.rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    this.rng = x;
    return x * 0x2545f4914f6cdd1d;
  }
}
