import { RouteRequest } from "../route-request";
import { Endpoint, Weights } from "../snapshot";
import { RatioScorer } from "./scorer";

/**
 * Predicted wait, aware of each pod's speed and batch size. With q =
 * queued requests now (core/snapshot.ts, estimatedWaiting: what the pod
 * reported waiting, plus what was sent since beyond its free batch slots)
 * and c = capacity relative to the fastest candidate:
 *
 *   wait_i = (q_i + 1) / c_i          (the +1 is this request's own turn)
 *   score_i = min_j wait_j / wait_i   in (0, 1]
 *
 * So a pod at 0.35x with 2 queued (wait 8.6) loses to a fast one with 4 (5),
 * and an idle slow pod (2.9) beats a fast one with 2 queued (3). Pods with
 * free batch slots all score 1: nothing waits there.
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
