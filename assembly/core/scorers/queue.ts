import { RouteRequest } from "../route-request";
import { Endpoint, Weights } from "../snapshot";
import { RatioScorer } from "./scorer";

/**
 * Predicted wait, aware of each pod's speed. With q = queued requests now
 * (scraped waiting + requests sent since the scrape - requests finished since)
 * and c = capacity relative to the fastest candidate:
 *
 *   wait_i = (q_i + 1) / c_i          (the +1 is this request's own turn)
 *   score_i = min_j wait_j / wait_i   in (0, 1]
 *
 * So a pod at 0.35x with 2 queued (wait 8.6) loses to a fast one with 4 (5),
 * and an idle slow pod (2.9) beats a fast one with 2 queued (3).
 */
export class QueueScorer extends RatioScorer {
  weight(w: Weights): f64 { return w.queue; }

  load(e: Endpoint, request: RouteRequest, i: i32): f64 {
    return predictedWait(e, request, i);
  }
}

/** wait_i above, for candidate `i` of the request being scored. */
export function predictedWait(e: Endpoint, request: RouteRequest, i: i32): f64 {
  return (e.estimatedWaiting + 1) / unchecked(request.capacity[i]);
}
