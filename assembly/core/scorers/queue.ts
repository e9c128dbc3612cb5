import { RouteRequest } from "../route-request";
import { Endpoint, Weights } from "../snapshot";
import { RatioScorer } from "./scorer";

/**
 * Prompt tokens an engine prefills in one step (vLLM's default
 * max_num_batched_tokens): a request arriving behind others waits for their
 * prefill in steps of this many tokens.
 */
const STEP_PREFILL_TOKENS: f64 = 2048;
/**
 * Loading a LoRA adapter stalls the pod about as long as prefilling this
 * many tokens (a ~200 ms load at ~0.25 ms per prompt token).
 */
const ADAPTER_LOAD_TOKENS: f64 = 800;

/**
 * Predicted wait for the first token, aware of each pod's speed and batch.
 * With q = requests ahead of this one, c = capacity relative to the fastest
 * candidate:
 *
 *   wait_i = (q_i + 1) / c_i          (the +1 is this request's own turn)
 *   score_i = min_j wait_j / wait_i   in (0, 1]
 *
 *   q_i = queued_i + starting_i x min(1, prompt tokens / 2048)
 *
 * queued (core/snapshot.ts, estimatedWaiting) is what exceeds the pod's batch
 * slots: it waits for a slot. starting is the rest of what it reported
 * waiting or was sent since the scrape: it has a slot and is being prefilled
 * ahead of this request, which costs it in proportion to the prompt's share
 * of a step (requests alike in size take about as long). A request for an
 * adapter the pod does not hold also waits for its load, counted as the
 * prefill of ADAPTER_LOAD_TOKENS. So a few short prompts ahead on an idle pod
 * weigh less than an adapter load, and affinity decides; long ones spread as
 * their prefills would queue. A pod at 0.35x
 * with 2 queued (wait 8.6) loses to a fast one with 4 (5), and an idle slow
 * pod (2.9) beats a fast one with 2 queued (3).
 */
export class QueueScorer extends RatioScorer {
  weight(w: Weights): f64 { return w.queue; }

  load(e: Endpoint, request: RouteRequest, i: i32): f64 {
    return predictedWait(e, request, i);
  }
}

/** wait_i above, for candidate `i` of the request being scored. */
export function predictedWait(e: Endpoint, request: RouteRequest, i: i32): f64 {
  const queued = e.estimatedWaiting;
  const starting = max(<f64>(e.waiting + e.sentSinceScrape) - queued, 0);
  const share = min(request.promptTokens / STEP_PREFILL_TOKENS, 1.0);
  const load = needsAdapterLoad(e, request) ? ADAPTER_LOAD_TOKENS / STEP_PREFILL_TOKENS : 0;
  return (queued + starting * share + load + 1) / unchecked(request.capacity[i]);
}

/** The request names an adapter the pod does not run or queue: it waits for the load too. */
function needsAdapterLoad(e: Endpoint, request: RouteRequest): bool {
  const adapter = request.model.adapter;
  return adapter.length > 0 && !e.runningAdapters.includes(adapter) && !e.waitingAdapters.includes(adapter);
}
