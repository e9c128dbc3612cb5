import { PrefixIndex } from "../prefix-index";
import { RouteRequest } from "../route-request";
import { Endpoint, Weights } from "../snapshot";
import { Scorer } from "./scorer";

/**
 * Prefix-cache affinity: the share of the prompt a pod probably holds in its
 * KV cache, learned from where earlier requests with the same leading blocks
 * were sent (core/prefix-index.ts, shared by all workers):
 *
 *   score_i = bytes of the prompt's longest prefix held by pod i / prompt bytes
 *
 * It is bounded by load through the other scorers: a pod keeps a hot prefix
 * until its predicted wait has grown enough that the queue and load scores
 * outweigh the saving; then the next request goes elsewhere and that pod
 * learns the prefix too, so a hot prefix spreads over as many pods as its
 * traffic needs.
 */
export class PrefixScorer extends Scorer {
  private hashes: StaticArray<u64> = new StaticArray<u64>(0);
  private matched: StaticArray<i32> = new StaticArray<i32>(0);

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
    if (this.hashes.length < n) {
      this.hashes = new StaticArray<u64>(n);
      this.matched = new StaticArray<i32>(n);
    }
    for (let i = 0; i < n; i++) unchecked(this.hashes[i] = unchecked(candidates[i]).addressHash);
    this.index.match(keys, this.hashes, n, this.matched);
    const total = <f64>keys.promptBytes;
    for (let i = 0; i < n; i++) unchecked(out[i] = <f64>keys.coveredBytes(unchecked(this.matched[i])) / total);
  }

  /** Blocks of the prompt already matched at candidate `i` in the last score() call. */
  matchedKeys(i: i32): i32 {
    return unchecked(this.matched[i]);
  }
}
