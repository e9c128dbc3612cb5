import { Endpoint } from "../../fleet/snapshot";
import { RouteRequest } from "../route-request";
import { RatioScorer } from "../scorer";

/**
 * A batch step's cost, in sequences, before any sequence is decoded, as a
 * share of the engine's batch slots. It is what makes load count only as it
 * becomes real: 4 requests on an idle 256-slot pod cost it half its score,
 * not 80%, so adapter affinity (weighted twice this scorer) still decides. A
 * larger share (1/16) weakens the pull of idle slow pods on a mixed fleet
 * too much (20% worse at p95 on the simulator).
 */
export const STEP_OVERHEAD_SHARE: f64 = 1.0 / 64;

/**
 * Fewest requests on the pod per unit of speed, judged against what it can
 * batch: with t = queued + running now (scraped, plus sent since the scrape,
 * minus finished since, never below this gateway's own in flight there),
 * s = batch slots and c = relative capacity,
 *
 *   load_i = (t_i + s_i / 64) / c_i          score_i = min_j load_j / load_i
 *
 * A step's time grows with the batch from a fixed overhead, so one request
 * more is worth little on an idle pod and much on a full one; on identical
 * pods with empty queues this still spreads decode work (join the shortest
 * batch), and adapter or prefix affinity decide until load is real.
 */
export class RunningScorer extends RatioScorer {
  constructor() {
    super("running");
  }

  load(e: Endpoint, request: RouteRequest, i: i32): f64 {
    return (e.estimatedTotal + e.effectiveSlots * STEP_OVERHEAD_SHARE) / unchecked(request.capacity[i]);
  }
}
