// The routing decision for one request body, shared verbatim by the Envoy
// filter and the native build: scan the body, resolve the model (or LoRA
// adapter) to its pool, judge the view's age, and rank the pool's endpoints.
import { ApiError, badRequest, modelNotFound, unavailable } from "./errors";
import { Picker } from "./picker";
import { ApiKind, OpenAIRequest } from "./request";
import { RouteRequest } from "./route-request";
import { Endpoint, Pool, Snapshot } from "./snapshot";
import { StaleViewPolicy, ViewPolicy, viewIsStale } from "./view";

export class Router {
  readonly body: OpenAIRequest = new OpenAIRequest();
  private request: RouteRequest = new RouteRequest();
  private picker: Picker;
  policy: ViewPolicy = new ViewPolicy();
  /** Set when route() returns false. */
  error: ApiError | null = null;
  /** Set when route() returns true: the pool that serves the model. */
  pool: Pool | null = null;
  /** The index of `pool` in the snapshot. */
  poolIndex: i32 = -1;
  /**
   * True when the view was too old to rank endpoints (StaleViewPolicy.FailOpen):
   * `ranked` is then empty and Envoy's own balancer picks among the pool's hosts.
   */
  blind: bool = false;

  constructor(seed: u64) {
    this.picker = new Picker(seed);
  }

  /** Best endpoint first, then fallbacks; empty when `blind`. */
  get ranked(): Endpoint[] {
    return this.picker.ranked;
  }

  /**
   * Decides where one request goes. `heardMs` is when the aggregator was last
   * heard from (0 = never), on the same clock as `nowMs`.
   */
  route(ptr: usize, len: i32, kind: ApiKind, snapshot: Snapshot | null, nowMs: u64, heardMs: u64): bool {
    this.error = null;
    this.pool = null;
    this.poolIndex = -1;
    this.blind = false;
    this.picker.ranked.length = 0;
    const body = this.body;
    if (!body.read(ptr, len, kind)) return this.fail(badRequest(body.problem, body.problemParam));
    if (snapshot == null) return this.fail(unavailable("The gateway has no endpoint data yet; retry shortly"));
    const model = snapshot.find(body.model);
    if (model == null) return this.fail(modelNotFound(body.model));
    const pool = snapshot.pools[model.pool];
    if (pool.endpoints.length == 0) return this.fail(unavailable("No endpoint serves model '" + body.model + "'"));
    if (viewIsStale(nowMs, heardMs, this.policy.maxAgeMs)) {
      if (this.policy.stalePolicy == StaleViewPolicy.Reject) {
        return this.fail(unavailable("The gateway has lost its view of the model servers; retry shortly"));
      }
      this.setPool(pool, model.pool);
      this.blind = true;
      return true;
    }
    const request = this.request;
    request.model = model;
    request.promptPtr = body.promptStart >= 0 ? body.promptPtr() : 0;
    request.promptLen = body.promptEnd - body.promptStart;
    request.nowMs = nowMs;
    this.picker.pick(pool, request);
    // Until the next snapshot shows it, count this request against the endpoint.
    this.picker.ranked[0].pending++;
    this.setPool(pool, model.pool);
    return true;
  }

  private setPool(pool: Pool, index: i32): void {
    this.pool = pool;
    this.poolIndex = index;
  }

  private fail(e: ApiError): bool {
    this.error = e;
    return false;
  }
}
