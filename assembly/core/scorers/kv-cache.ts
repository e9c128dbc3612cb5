import { RouteRequest } from "./route-request";
import { Endpoint, Weights } from "../fleet/snapshot";
import { Scorer } from "./scorer";

/** Prefers free KV-cache memory: 1 - usage, clamped to [0, 1]. */
export class KvCacheScorer extends Scorer {
  weight(w: Weights): f64 { return w.kvCache; }

  score(candidates: Endpoint[], request: RouteRequest, out: StaticArray<f64>): void {
    for (let i = 0; i < candidates.length; i++) {
      const free = 1.0 - unchecked(candidates[i]).kvCacheUsage;
      unchecked(out[i] = free < 0 ? 0 : free > 1 ? 1 : free);
    }
  }
}
