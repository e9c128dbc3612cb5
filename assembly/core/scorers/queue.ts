import { RouteRequest } from "../route-request";
import { Endpoint, Weights } from "../snapshot";
import { Scorer } from "./scorer";

/**
 * Predicted wait, aware of each pod's speed. With q = queued requests now
 * (scraped waiting + requests sent since the scrape - requests finished since)
 * and c = capacity relative to the fastest candidate:
 *
 *   wait_i = (q_i + 1) / c_i          (the +1 is this request's own turn)
 *   score_i = min_j wait_j / wait_i   in (0, 1]
 *
 * So a pod at 0.35x with 2 queued (wait 8.6) loses to a fast one with 4 (5),
 * an idle slow pod (2.9) beats a fast one with 2 queued (3), and a ratio
 * rather than a min-max keeps one extra request from erasing a pod's score.
 */
export class QueueScorer extends Scorer {
  weight(w: Weights): f64 { return w.queue; }

  score(candidates: Endpoint[], request: RouteRequest, out: StaticArray<f64>): void {
    const n = candidates.length;
    let best = f64.MAX_VALUE;
    for (let i = 0; i < n; i++) {
      const wait = (unchecked(candidates[i]).estimatedWaiting + 1) / unchecked(request.capacity[i]);
      unchecked(out[i] = wait);
      if (wait < best) best = wait;
    }
    for (let i = 0; i < n; i++) unchecked(out[i] = best / unchecked(out[i]));
  }
}
