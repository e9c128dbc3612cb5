// A scorer rates each candidate endpoint for one request in [0, 1]; the
// picker sums the scores weighted by the pool's configured weights.
import { Endpoint, Weights } from "../snapshot";
import { RouteRequest } from "../route-request";

export abstract class Scorer {
  /** This scorer's weight in a pool's weight set. */
  abstract weight(w: Weights): f64;

  /** Writes one score in [0, 1] per candidate into `out[0..n)`. */
  abstract score(candidates: Endpoint[], request: RouteRequest, out: StaticArray<f64>): void;
}

/**
 * Scores a load figure relative to the other candidates:
 * (max - v) / (max - min), so the least loaded gets 1 and the most loaded 0;
 * all equal scores 1.
 */
export abstract class MinMaxScorer extends Scorer {
  abstract load(e: Endpoint, request: RouteRequest, i: i32): f64;

  score(candidates: Endpoint[], request: RouteRequest, out: StaticArray<f64>): void {
    const n = candidates.length;
    let lo = f64.MAX_VALUE;
    let hi = -f64.MAX_VALUE;
    for (let i = 0; i < n; i++) {
      const v = this.load(unchecked(candidates[i]), request, i);
      unchecked(out[i] = v);
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
    const span = hi - lo;
    for (let i = 0; i < n; i++) {
      unchecked(out[i] = span > 0 ? (hi - unchecked(out[i])) / span : 1.0);
    }
  }
}
