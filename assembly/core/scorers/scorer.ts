// A scorer rates each candidate endpoint for one request in [0, 1]; the
// picker sums the scores weighted by the served model's profile.
import { Endpoint, Weights } from "../fleet/snapshot";
import { RouteRequest } from "./route-request";

export abstract class Scorer {
  /** This scorer's weight in a profile's weight set. */
  abstract weight(w: Weights): f64;

  /** Writes one score in [0, 1] per candidate into `out[0..n)`. */
  abstract score(candidates: Endpoint[], request: RouteRequest, out: StaticArray<f64>): void;
}

/**
 * Scores a positive load figure by the least loaded candidate's over its own:
 * min_j load_j / load_i, so the least loaded gets 1 and one with twice that
 * load 0.5. A ratio, not a min-max: one request more is worth much on an
 * empty pod and little on a busy one, so a single request in flight cannot
 * outweigh adapter or prefix affinity.
 */
export abstract class RatioScorer extends Scorer {
  abstract load(e: Endpoint, request: RouteRequest, i: i32): f64;

  score(candidates: Endpoint[], request: RouteRequest, out: StaticArray<f64>): void {
    const n = candidates.length;
    let best = f64.MAX_VALUE;
    for (let i = 0; i < n; i++) {
      const load = this.load(unchecked(candidates[i]), request, i);
      unchecked(out[i] = load);
      if (load < best) best = load;
    }
    for (let i = 0; i < n; i++) unchecked(out[i] = best / unchecked(out[i]));
  }
}
