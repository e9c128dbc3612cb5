import { RouteRequest } from "../route-request";
import { Endpoint, Weights } from "../snapshot";
import { Scorer } from "./scorer";

/**
 * Fewest requests on the pod per unit of speed: with t = queued + running now
 * (scraped, plus sent since the scrape, minus finished since) and c = relative
 * capacity,
 *
 *   load_i = (t_i + 1) / c_i          score_i = min_j load_j / load_i
 *
 * On identical pods with empty queues this spreads decode work (join the
 * shortest batch). A ratio rather than a min-max: one request more on a pod
 * running 1 halves its score, on a pod running 20 it costs 5%, so a single
 * in-flight request cannot outweigh adapter or prefix affinity, while a
 * genuinely fuller batch still does.
 */
export class RunningScorer extends Scorer {
  weight(w: Weights): f64 { return w.running; }

  score(candidates: Endpoint[], request: RouteRequest, out: StaticArray<f64>): void {
    const n = candidates.length;
    let best = f64.MAX_VALUE;
    for (let i = 0; i < n; i++) {
      const load = (unchecked(candidates[i]).estimatedTotal + 1) / unchecked(request.capacity[i]);
      unchecked(out[i] = load);
      if (load < best) best = load;
    }
    for (let i = 0; i < n; i++) unchecked(out[i] = best / unchecked(out[i]));
  }
}
