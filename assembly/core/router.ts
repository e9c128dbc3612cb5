// The routing decision for one request body, shared verbatim by the Envoy
// filter and the native build: scan the body, resolve the model (or LoRA
// adapter) to its pool, and pick an endpoint.
import { ApiError, badRequest, modelNotFound, unavailable } from "./errors";
import { Picker } from "./picker";
import { ApiKind, OpenAIRequest } from "./request";
import { RouteRequest } from "./route-request";
import { Endpoint, Snapshot } from "./snapshot";

export class Router {
  readonly body: OpenAIRequest = new OpenAIRequest();
  private request: RouteRequest = new RouteRequest();
  private picker: Picker;
  /** Set when route() returns null. */
  error: ApiError | null = null;

  constructor(seed: u64) {
    this.picker = new Picker(seed);
  }

  /** The chosen endpoint, or null with `error` set. */
  route(ptr: usize, len: i32, kind: ApiKind, snapshot: Snapshot | null): Endpoint | null {
    this.error = null;
    const body = this.body;
    if (!body.read(ptr, len, kind)) return this.fail(badRequest(body.problem, body.problemParam));
    if (snapshot == null) return this.fail(unavailable("The gateway has no endpoint data yet; retry shortly"));
    const model = snapshot.find(body.model);
    if (model == null) return this.fail(modelNotFound(body.model));
    const request = this.request;
    request.model = model;
    request.promptPtr = body.promptStart >= 0 ? body.promptPtr() : 0;
    request.promptLen = body.promptEnd - body.promptStart;
    const chosen = this.picker.pick(snapshot.pools[model.pool], request);
    if (chosen == null) return this.fail(unavailable("No endpoint serves model '" + body.model + "'"));
    // Until the next snapshot shows it, count this request against the endpoint.
    chosen.pending++;
    return chosen;
  }

  private fail(e: ApiError): Endpoint | null {
    this.error = e;
    return null;
  }
}
