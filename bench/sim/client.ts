/**
 * The simulated client: sends each request through the policy when it
 * arrives and obeys a refusal as a well-behaved OpenAI client does. A 429
 * with a Retry-After is sent again once, exactly that many seconds later,
 * with the same body and class; a second refusal is final. Policies that
 * never refuse (every baseline) never see a retry.
 */
import type { Policy, RouteRequest } from "../policies/types.js";
import type { EventQueue } from "./events.js";
import type { SimFleet } from "./fleet.js";
import { enginePrompt, requestBody, type Trace, type TraceRequest } from "./workload.js";

/** The texts are built only if the policy asks for them. */
function routeRequest(trace: Trace, request: TraceRequest): RouteRequest {
  let prompt: string | undefined;
  let body: string | undefined;
  return {
    request,
    get prompt() {
      return (prompt ??= enginePrompt(trace, request));
    },
    get body() {
      return (body ??= requestBody(trace, request));
    },
  };
}

export class SimClient {
  /** Attempts decided but not yet on their pod, and retries not yet sent: the run is not over while any remain. */
  pending = 0;

  constructor(
    private readonly trace: Trace,
    private readonly policy: Policy,
    private readonly fleet: SimFleet,
    private readonly queue: EventQueue,
  ) {}

  /** One attempt, arriving at the gateway at t. */
  send(request: TraceRequest, t: number, isRetry = false): void {
    const req = routeRequest(this.trace, request);
    const decision = this.policy.route(req, t);
    if ("pod" in decision) {
      if (this.policy.decisionDelayMs <= 0) {
        this.fleet.submit(request, decision.pod, req.prompt, t, t);
        return;
      }
      this.pending++;
      this.queue.at(t + this.policy.decisionDelayMs, (at) => {
        this.pending--;
        this.fleet.submit(request, decision.pod, req.prompt, at, t);
      });
      return;
    }
    if (decision.status === 429 && !isRetry) {
      const retryAfterS = decision.retryAfterS ?? null;
      this.fleet.noteRefusal(request, retryAfterS);
      if (retryAfterS !== null) {
        this.pending++;
        this.queue.at(t + retryAfterS * 1000, (at) => {
          this.pending--;
          this.fleet.noteRetry(request, at);
          this.send(request, at, true);
        });
        return;
      }
    }
    this.fleet.reject(request, decision.status, t);
  }
}
