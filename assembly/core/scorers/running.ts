import { RouteRequest } from "../route-request";
import { Endpoint, Weights } from "../snapshot";
import { RatioScorer } from "./scorer";

/**
 * Fewest requests on the pod per unit of speed: with t = queued + running now
 * (scraped, plus sent since the scrape, minus finished since) and c = relative
 * capacity,
 *
 *   load_i = (t_i + 1) / c_i          score_i = min_j load_j / load_i
 *
 * On identical pods with empty queues this spreads decode work (join the
 * shortest batch): one request more halves the score of a pod running 1 and
 * costs a pod running 20 only 5%.
 */
export class RunningScorer extends RatioScorer {
  weight(w: Weights): f64 { return w.running; }

  load(e: Endpoint, request: RouteRequest, i: i32): f64 {
    return (e.estimatedTotal + 1) / unchecked(request.capacity[i]);
  }
}
