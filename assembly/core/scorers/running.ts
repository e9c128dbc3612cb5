import { RouteRequest } from "../route-request";
import { Endpoint, Weights } from "../snapshot";
import { MinMaxScorer } from "./scorer";

/**
 * Fewest requests on the pod per unit of speed: with t = queued + running now
 * (scraped, plus sent since the scrape, minus finished since) and c = relative
 * capacity, load_i = t_i / c_i and score_i = (max - load_i) / (max - min)
 * (1 when all are equal). On identical pods this is join-the-shortest-queue
 * over the whole batch, which spreads decode work when nothing is queued.
 */
export class RunningScorer extends MinMaxScorer {
  weight(w: Weights): f64 { return w.running; }

  load(e: Endpoint, request: RouteRequest, i: i32): f64 {
    return e.estimatedTotal / unchecked(request.capacity[i]);
  }
}
