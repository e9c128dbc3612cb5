import { Endpoint, prefillShare } from "../../fleet/snapshot";
import { RouteRequest } from "../route-request";
import { RatioScorer } from "../scorer";

/**
 * Loading a LoRA adapter stalls the pod about as long as a full prefill step
 * (a few hundred ms from host memory; more from disk).
 */
const ADAPTER_LOAD_TOKENS: f64 = 2048;

/**
 * Predicted wait for the first token, aware of each pod's speed and batch.
 * With q = requests ahead of this one, c = capacity relative to the fastest
 * candidate:
 *
 *   wait_i = (q_i + 1) / c_i          (the +1 is this request's own turn)
 *   score_i = min_j wait_j / wait_i   in (0, 1]
 *
 *   q_i = requests ahead (core/fleet/snapshot.ts, requestsAhead): those beyond
 *         the pod's room in full; this gateway's streams there not past
 *         their first token by their own prompts' 2048-token steps; the rest
 *         it reported waiting or was sent since (being admitted and
 *         prefilled) by this prompt's share of a step; + the adapter's load,
 *         if the pod lacks it
 *
 * A request for an
 * adapter the pod does not hold also waits for its load, counted as the
 * prefill of ADAPTER_LOAD_TOKENS. So a few short prompts ahead on an idle pod
 * weigh less than an adapter load, and affinity decides; long ones spread as
 * their prefills would queue. A pod at 0.35x
 * with 2 queued (wait 8.6) loses to a fast one with 4 (5), and an idle slow
 * pod (2.9) beats a fast one with 2 queued (3).
 */
export class QueueScorer extends RatioScorer {
  constructor() {
    super("queue");
  }

  load(e: Endpoint, request: RouteRequest, i: i32): f64 {
    return predictedWait(e, request, i);
  }
}

/** wait_i above, for candidate `i` of the request being scored. */
export function predictedWait(e: Endpoint, request: RouteRequest, i: i32): f64 {
  const load = needsAdapterLoad(e, request) ? prefillShare(ADAPTER_LOAD_TOKENS) : 0;
  return (e.requestsAhead(request.prefillShare) + load + 1) / unchecked(request.capacity[i]);
}

/** The request names an adapter the pod does not run or queue: it waits for the load too. */
function needsAdapterLoad(e: Endpoint, request: RouteRequest): bool {
  const adapter = request.model.adapter;
  return adapter.length > 0 && !e.runningAdapters.includes(adapter) && !e.waitingAdapters.includes(adapter);
}
