import { Endpoint } from "../../fleet/snapshot";
import { RouteRequest } from "../route-request";
import { Scorer } from "../scorer";

/** Prefers free KV-cache memory: 1 - usage, clamped to [0, 1]. */
export class KvCacheScorer extends Scorer {
  constructor() {
    super("kvCache");
  }

  score(candidates: Endpoint[], request: RouteRequest, out: StaticArray<f64>): void {
    for (let i = 0; i < candidates.length; i++) {
      unchecked(out[i] = freeShare(unchecked(candidates[i])));
    }
  }

  estimate(e: Endpoint, request: RouteRequest): f64 {
    return freeShare(e);
  }
}

function freeShare(e: Endpoint): f64 {
  const free = 1.0 - e.kvCacheUsage;
  return free < 0 ? 0 : free > 1 ? 1 : free;
}
