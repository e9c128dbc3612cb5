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
