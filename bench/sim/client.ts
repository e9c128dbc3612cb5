/**
 * The simulated client: sends each request through the policy when it
 * arrives and obeys a refusal as a well-behaved OpenAI client does. A 429
 * with a Retry-After is sent again once, exactly that many seconds later,
 * with the same body and class; a second refusal is final. Policies that
 * never refuse (every baseline) never see a retry. A request the gateway
 * holds waits, its connection open, for the decision the policy releases.
 */
import type { Decision, Policy, RouteRequest } from "../policies/types.js";
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
  ) {
    policy.onRelease?.((request, decision, t) => {
      const attempt = this.held.get(request.index)!;
      this.held.delete(request.index);
      this.pending--;
      this.settle(request, routeRequest(this.trace, request), decision, t, attempt);
    });
  }

  /** Held requests: when their attempt reached the gateway, and whether it is a retry (a second refusal of one is final). */
  private readonly held = new Map<number, { atMs: number; isRetry: boolean }>();

  /** One attempt, arriving at the gateway at t. */
  send(request: TraceRequest, t: number, isRetry = false): void {
    const req = routeRequest(this.trace, request);
    const outcome = this.policy.route(req, t);
    if ("held" in outcome) {
      this.pending++;
      this.held.set(request.index, { atMs: t, isRetry });
      return;
    }
    this.settle(request, req, outcome, t, { atMs: t, isRetry });
  }

  /** Acts on the decision for an attempt that reached the gateway at `attempt.atMs`, decided at t. */
  private settle(request: TraceRequest, req: RouteRequest, decision: Decision, t: number, attempt: { atMs: number; isRetry: boolean }): void {
    const isRetry = attempt.isRetry;
    if ("pod" in decision) {
      if (this.policy.decisionDelayMs <= 0) {
        this.fleet.submit(request, decision.pod, req.prompt, t, attempt.atMs);
        return;
      }
      this.pending++;
      this.queue.at(t + this.policy.decisionDelayMs, (at) => {
        this.pending--;
        this.fleet.submit(request, decision.pod, req.prompt, at, attempt.atMs);
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
