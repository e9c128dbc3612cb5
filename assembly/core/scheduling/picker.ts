// Ranks a pool's endpoints by their weighted score sum and keeps the best few:
// the first is where the request goes, the rest are fallbacks Envoy tries in
// order if that one refuses or fails before answering. Ties break at random.
// A large pool is ranked over its shortlist (scheduling/shortlist.ts).
// Scratch arrays are reused across requests so a pick allocates nothing once
// they have grown to the pool size.
import { hasRoom } from "./admission";
import { relativeCapacities } from "./capacity";
import { leanApart, ReplicaPlace } from "./replica-lean";
import { FULL_SCAN, isUsable, Shortlist } from "./shortlist";
import { InflightTable } from "../fleet/inflight";
import { PrefixIndex } from "../prefix/prefix-index";
import { DecisionLog } from "../prefix/decision-log";
import { registeredScorers } from "../scorers/registry";
import { RouteRequest } from "../scorers/route-request";
import { Scorer } from "../scorers/scorer";
import { Admission } from "../fleet/admission-limits";
import { Priority } from "../fleet/priority";
import { Endpoint, Pool, Weights } from "../fleet/snapshot";
import { mix64 } from "../wire/hash";

/** Primary plus fallbacks; matches the retry budget of the Envoy route (2 retries). */
export const MAX_RANKED = 3;

export class Picker {
  readonly scorers: Scorer[];
  private candidates: Endpoint[] = [];
  private totals: StaticArray<f64> = new StaticArray<f64>(0);
  private scratch: StaticArray<f64> = new StaticArray<f64>(0);
  private rng: u64;
  /** Salts the shortlists' tie-breaks: per worker (its seed), drawn apart from the pick's random sequence. */
  private readonly salt: u64;
  /** The prepared candidates are the pods with fresh metrics (not the fail-open fallback). */
  trusted: bool = false;
  /** Pools with up to this many usable pods are scored whole (more: over their shortlist). */
  fullScanUpTo: i32 = FULL_SCAN;
  /** The prepared candidates are a shortlist of the pool's usable pods, not all of them. */
  private shortlisted: bool = false;
  private shortlists: Map<string, Shortlist> = new Map();
  private preparedPool: Pool | null = null;
  /** The pool's usable pods, gathered only when a shortlist had no room (admission). */
  private rest: Endpoint[] = [];
  /** Numbers the decisions, so a scorer can tell whose results it kept (RouteRequest.serial). */
  private decisions: u32 = 0;
  /** Among the replicas sharing through the control plane: near-equal pods are ranked apart from theirs (replica-lean.ts). */
  readonly place: ReplicaPlace = new ReplicaPlace();
  /** The last pick, best first: at most MAX_RANKED endpoints. */
  readonly ranked: Endpoint[] = [];
  /** Candidate index of each ranked endpoint. */
  private order: i32[] = [];
  private rankedTotals: StaticArray<f64> = new StaticArray<f64>(MAX_RANKED);
  /** Per-scorer weighted scores of the last explained pick. */
  private contributions: StaticArray<f64> = new StaticArray<f64>(0);

  constructor(seed: u64, prefixes: PrefixIndex) {
    const rng: u64 = seed == 0 ? 0x9e3779b97f4a7c15 : seed;
    this.rng = rng;
    this.scorers = registeredScorers(prefixes);
    this.salt = mix64(rng);
  }

  /** Brings the pool's endpoints' in-flight figures up to date with `inflight` (before prepare() or chooseBlind()). */
  observe(pool: Pool, inflight: InflightTable, nowMs: u64): void {
    this.shortlistOf(pool).observe(pool, inflight, nowMs, this.weightsOf(pool.weights));
  }

  private shortlistOf(pool: Pool): Shortlist {
    if (this.shortlists.has(pool.name)) return this.shortlists.get(pool.name);
    const list = new Shortlist(this.scorers, this.salt);
    this.shortlists.set(pool.name, list);
    return list;
  }

  /** `weights` in the scorers' order (resolved once per weight set: a snapshot's sets are read-only). */
  weightsOf(weights: Weights): StaticArray<f64> {
    let resolved = weights.resolved;
    if (resolved == null) {
      const scorers = this.scorers;
      resolved = new StaticArray<f64>(scorers.length);
      for (let s = 0; s < scorers.length; s++) unchecked(resolved[s] = weights.get(unchecked(scorers[s]).name));
      weights.resolved = resolved;
    }
    return resolved;
  }

  /** Some scorer weighed by `weights` reads the prompt's prefix keys (`keys`) or records its picks (otherwise). */
  weighs(weights: Weights, keys: bool): bool {
    const w = this.weightsOf(weights);
    for (let s = 0; s < this.scorers.length; s++) {
      const scorer = unchecked(this.scorers[s]);
      if (unchecked(w[s]) > 0 && (keys ? scorer.usesPrefixKeys : scorer.recordsPicks)) return true;
    }
    return false;
  }

  /** After a pick: each weighed scorer that records writes what it learned to `log`. */
  record(primary: Endpoint, request: RouteRequest, log: DecisionLog): void {
    const w = this.weightsOf(request.weights);
    for (let s = 0; s < this.scorers.length; s++) {
      const scorer = unchecked(this.scorers[s]);
      if (scorer.recordsPicks && unchecked(w[s]) > 0) scorer.record(primary, request, log);
    }
  }

  /**
   * First step of a pick, after observe(): the candidates (see
   * collectCandidates, or the pool's shortlist) and their relative speeds in
   * `request.capacity`; returns how many pods they stand for (a shortlist
   * stands for all the usable pods). `trusted` says whether they are pods
   * with fresh metrics. The request's prefix keys and adapter are set.
   */
  prepare(pool: Pool, request: RouteRequest): i32 {
    this.ranked.length = 0;
    this.preparedPool = pool;
    request.serial = ++this.decisions;
    const list = this.shortlistOf(pool);
    this.shortlisted = list.usable > this.fullScanUpTo;
    if (this.shortlisted) {
      this.trusted = true;
      this.ensureCapacity(list.gather(pool, request, this.weightsOf(request.weights), this.candidates));
      return list.usable;
    }
    const n = this.collectCandidates(pool, request.nowMs);
    this.ensureCapacity(n);
    if (request.capacity.length < n) request.capacity = new StaticArray<f64>(n);
    if (n == 1) unchecked(request.capacity[0] = 1.0);
    else if (n > 1) relativeCapacities(this.candidates, request.capacity, this.scratch);
    return n;
  }

  /**
   * Some prepared pod has room for class `p` (for its retry, with `retry`)
   * under `a`; `share` is the request's prompt's share of a prefill step.
   * A shortlist without room is not the last word: the pool's other usable
   * pods are checked too, so nothing that could be served is refused.
   */
  hasRoom(a: Admission, share: f64, p: Priority, nowMs: u64, retry: bool = false): bool {
    const c = this.candidates;
    if (hasRoom(a, c, c.length, share, p, retry)) return true;
    if (!this.shortlisted) return false;
    const all = this.preparedPool!.endpoints;
    const rest = this.rest;
    rest.length = 0;
    for (let i = 0; i < all.length; i++) {
      const e = unchecked(all[i]);
      if (isUsable(e, nowMs)) rest.push(e);
    }
    return hasRoom(a, rest, rest.length, share, p, retry);
  }

  /**
   * A pick without trusted metrics (the view is too old to score on): the
   * pods that were fresh and not ejected when last heard of, fewest of this
   * gateway's requests in flight first, ties at random. Empty when there are
   * none; Envoy's own balancer then picks among the pool's healthy hosts.
   */
  chooseBlind(pool: Pool, nowMs: u64): void {
    this.ranked.length = 0;
    const n = this.collectUsable(pool, nowMs);
    const c = this.candidates;
    this.ensureCapacity(n);
    for (let i = 0; i < n; i++) unchecked(this.totals[i] = -<f64>unchecked(c[i]).inflight);
    const keep = min(n, MAX_RANKED);
    for (let k = 0; k < keep; k++) {
      const best = this.argmax(n);
      this.ranked.push(unchecked(c[best]));
      unchecked(this.totals[best] = -f64.MAX_VALUE);
    }
  }

  /**
   * Second step: fills `ranked` from the prepared candidates. With `explain`,
   * `contributions[s * n + i]` keeps scorer s's weighted score of candidate i
   * (among replicas the totals hold the lean too, replica-lean.ts).
   */
  choose(request: RouteRequest, explain: bool): void {
    const ranked = this.ranked;
    const n = this.candidates.length;
    if (n == 0) return;
    if (n == 1 && !explain) {
      ranked.push(unchecked(this.candidates[0]));
      return;
    }
    const weights = this.weightsOf(request.weights);
    const totals = this.totals;
    const scorers = this.scorers;
    if (explain) this.contributions = new StaticArray<f64>(scorers.length * n);
    for (let i = 0; i < n; i++) unchecked(totals[i] = 0);
    for (let s = 0; s < scorers.length; s++) {
      const scorer = unchecked(scorers[s]);
      const w = unchecked(weights[s]);
      if (w == 0) continue;
      scorer.score(this.candidates, request, this.scratch);
      for (let i = 0; i < n; i++) {
        const c = w * unchecked(this.scratch[i]);
        unchecked(totals[i] += c);
        if (explain) unchecked(this.contributions[s * n + i] = c);
      }
    }
    if (this.place.shared) {
      let sum: f64 = 0;
      for (let s = 0; s < scorers.length; s++) sum += unchecked(weights[s]);
      leanApart(this.candidates, totals, n, sum, this.place, this.salt);
    }
    const keep = min(n, MAX_RANKED);
    const order = this.order;
    order.length = 0;
    for (let k = 0; k < keep; k++) {
      const best = this.argmax(n);
      ranked.push(unchecked(this.candidates[best]));
      order.push(best);
      if (explain) unchecked(this.rankedTotals[k] = unchecked(totals[best]));
      unchecked(totals[best] = -f64.MAX_VALUE);
    }
  }

  /** For an explained pick: ranked endpoint k's weighted score from scorer s, and its total. */
  contribution(k: i32, s: i32): f64 {
    return unchecked(this.contributions[s * this.candidates.length + unchecked(this.order[k])]);
  }

  rankedTotal(k: i32): f64 {
    return unchecked(this.rankedTotals[k]);
  }

  get candidateList(): Endpoint[] {
    return this.candidates;
  }

  /**
   * Usable endpoints: fresh metrics and not ejected. If none is, the ones not
   * ejected, then all of them: with nothing better to go on, Envoy's retries
   * and outlier detection are the last line (fail open within the pool).
   */
  private collectCandidates(pool: Pool, nowMs: u64): i32 {
    const all = pool.endpoints;
    const c = this.candidates;
    this.trusted = this.collectUsable(pool, nowMs) > 0;
    if (c.length == 0) {
      for (let i = 0; i < all.length; i++) {
        const e = unchecked(all[i]);
        if (e.ejectedUntilMs <= nowMs) c.push(e);
      }
    }
    if (c.length == 0) for (let i = 0; i < all.length; i++) c.push(unchecked(all[i]));
    return c.length;
  }

  /** The candidates become the pool's endpoints with fresh metrics that are not ejected; returns how many. */
  private collectUsable(pool: Pool, nowMs: u64): i32 {
    const all = pool.endpoints;
    const c = this.candidates;
    c.length = 0;
    for (let i = 0; i < all.length; i++) {
      const e = unchecked(all[i]);
      if (isUsable(e, nowMs)) c.push(e);
    }
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
