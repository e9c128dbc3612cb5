import { PrefixIndex } from "../prefix-index";
import { RouteRequest } from "../route-request";
import { Endpoint, Weights } from "../snapshot";
import { predictedWait } from "./queue";
import { RunningScorer } from "./running";
import { Scorer } from "./scorer";

/**
 * Prefix-cache affinity: the share of the prompt a pod probably holds in its
 * KV cache, learned from where earlier requests with the same leading blocks
 * were sent (core/prefix-index.ts, shared by all workers):
 *
 *   h_i = bytes of the prompt's longest prefix held by pod i / prompt bytes
 *   score_i = h_i   if wait_i <= min_j wait_j + h_i
 *                   and load_i <= min_j load_j x (1 + h_i),   else 0
 *
 * with wait the queue scorer's predicted wait (queued requests over relative
 * speed) and load the running scorer's (batch occupancy over speed). A hit
 * saves the held part of the prefill, so the more of the prompt a pod holds,
 * the more queue and batch it may carry over the least loaded pod; past that
 * the hit saves less than the wait it costs, the request goes where the load
 * scorers say, and that pod learns the prefix too. A hot prefix spreads over
 * as many pods as its traffic needs, and once every pod holds it all score
 * alike and load alone decides (bounded-load consistent hashing).
 */
export class PrefixScorer extends Scorer {
  /** Matched keys per pool slot, kept for the router to account the decision. */
  matched: StaticArray<i32> = new StaticArray<i32>(0);
  private running: RunningScorer = new RunningScorer();

  constructor(private index: PrefixIndex) {
    super();
  }

  weight(w: Weights): f64 { return w.prefix; }

  score(candidates: Endpoint[], request: RouteRequest, out: StaticArray<f64>): void {
    const n = candidates.length;
    const keys = request.prefix;
    if (keys.count == 0) {
      for (let i = 0; i < n; i++) unchecked(out[i] = 0);
      return;
    }
    const pool = request.pool;
    if (this.matched.length != pool.endpoints.length) this.matched = new StaticArray<i32>(pool.endpoints.length);
    this.index.match(keys, pool, this.matched);
    let leastWait = f64.MAX_VALUE;
    let leastLoad = f64.MAX_VALUE;
    for (let i = 0; i < n; i++) {
      const e = unchecked(candidates[i]);
      leastWait = min(leastWait, predictedWait(e, request, i));
      leastLoad = min(leastLoad, this.running.load(e, request, i));
    }
    const total = <f64>keys.promptBytes;
    for (let i = 0; i < n; i++) {
      const e = unchecked(candidates[i]);
      const held = <f64>keys.coveredBytes(unchecked(this.matched[e.slot])) / total;
      const worth = held > 0 &&
        predictedWait(e, request, i) <= leastWait + held &&
        this.running.load(e, request, i) <= leastLoad * (1 + held);
      unchecked(out[i] = worth ? held : 0);
    }
  }
}
