// A scorer rates each candidate endpoint for one request in [0, 1]; the
// picker sums the scores weighted by the served model's profile. Each scorer
// lives in a folder of its own (code, formula, test, scorer.json) and is
// listed once in registry.ts; its name is its key in the config's weights,
// on the wire and in the decision header.
import { Endpoint, Pool } from "../fleet/snapshot";
import { DecisionLog } from "../prefix/decision-log";
import { RouteRequest } from "./route-request";

export abstract class Scorer {
  /**
   * `name`: its key in weights. `usesPrefixKeys`: it reads the prompt's
   * prefix keys (the router computes them only when such a scorer weighs).
   * `recordsPicks`: it writes what a pick taught it to the prefix index,
   * which every worker replays (the filter shares the log only while such a
   * scorer weighs).
   */
  constructor(readonly name: string, readonly usesPrefixKeys: bool = false, readonly recordsPicks: bool = false) {}

  /** Writes one score in [0, 1] per candidate into `out[0..n)`. */
  abstract score(candidates: Endpoint[], request: RouteRequest, out: StaticArray<f64>): void;

  /**
   * For ranking a large pool's endpoints before a request is known
   * (scheduling/shortlist.ts): how much this scorer likes `e` for a typical
   * request (`request`: no adapter, no prefix, a typical prompt;
   * `request.capacity[0]` is e's relative capacity), higher better. Only
   * the order matters. Scorers of load override it; one of affinity scores
   * 0 here and nominates its pods instead.
   */
  estimate(e: Endpoint, request: RouteRequest): f64 {
    return 0;
  }

  /** Pool slots this scorer favours for `request` whatever their load (the pods holding what it looks for). */
  nominate(pool: Pool, request: RouteRequest, out: i32[]): void {}

  /** After a pick that weighed this scorer (with recordsPicks): what it learns from where the request went. */
  record(primary: Endpoint, request: RouteRequest, log: DecisionLog): void {}
}

/**
 * Scores a positive load figure by the least loaded candidate's over its own:
 * min_j load_j / load_i, so the least loaded gets 1 and one with twice that
 * load 0.5. A ratio, not a min-max: one request more is worth much on an
 * empty pod and little on a busy one, so a single request in flight cannot
 * outweigh adapter or prefix affinity.
 */
export abstract class RatioScorer extends Scorer {
  abstract load(e: Endpoint, request: RouteRequest, i: i32): f64;

  score(candidates: Endpoint[], request: RouteRequest, out: StaticArray<f64>): void {
    const n = candidates.length;
    let best = f64.MAX_VALUE;
    for (let i = 0; i < n; i++) {
      const load = this.load(unchecked(candidates[i]), request, i);
      unchecked(out[i] = load);
      if (load < best) best = load;
    }
    for (let i = 0; i < n; i++) unchecked(out[i] = best / unchecked(out[i]));
  }

  estimate(e: Endpoint, request: RouteRequest): f64 {
    return 1.0 / this.load(e, request, 0);
  }
}
