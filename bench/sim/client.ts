/**
 * The simulated client: sends each request through the policy when it
 * arrives and retries a refusal as the OpenAI SDKs do (bench/sdk-retry.ts),
 * with the same body and class. Policies that never refuse (every baseline)
 * never see a retry. A request the gateway holds waits, its connection open,
 * for the decision the policy releases.
 */
import type { Decision, Policy, RouteRequest } from "../policies/types.js";
import type { EventQueue } from "./events.js";
import type { SimFleet } from "./fleet.js";
import { deriveSeed, Rng } from "../../testing/fixtures/rng.js";
import { sdkRetries, sdkRetryDelayMs } from "../sdk-retry.js";
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
    seed: number,
  ) {
    this.jitter = new Rng(deriveSeed(seed, "sdk-retry-jitter"));
    policy.onRelease?.((request, decision, t) => {
      const attempt = this.held.get(request.index)!;
      this.held.delete(request.index);
      this.pending--;
      this.settle(request, routeRequest(this.trace, request), decision, t, attempt);
    });
  }

  private readonly jitter: Rng;

  /** Held requests: when their attempt reached the gateway, and how many retries came before it. */
  private readonly held = new Map<number, Attempt>();

  /** One attempt, arriving at the gateway at t, after `retries` retries. */
  send(request: TraceRequest, t: number, retries = 0): void {
    const req = routeRequest(this.trace, request);
    const outcome = this.policy.route(req, t);
    if ("held" in outcome) {
      this.pending++;
      this.held.set(request.index, { atMs: t, retries });
      return;
    }
    this.settle(request, req, outcome, t, { atMs: t, retries });
  }

  /** Acts on the decision for an attempt that reached the gateway at `attempt.atMs`, decided at t. */
  private settle(request: TraceRequest, req: RouteRequest, decision: Decision, t: number, attempt: Attempt): void {
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
    const retryAfterS = decision.retryAfterS ?? null;
    const delayMs = sdkRetries(decision.status) ? sdkRetryDelayMs(retryAfterS, attempt.retries, () => this.jitter.next()) : null;
    if (attempt.retries === 0 && (decision.status === 429 || delayMs !== null)) this.fleet.noteRefusal(request, retryAfterS);
    if (delayMs === null) {
      this.fleet.reject(request, decision.status, t);
      return;
    }
    this.pending++;
    this.queue.at(t + delayMs, (at) => {
      this.pending--;
      this.fleet.noteRetry(request, at);
      this.send(request, at, attempt.retries + 1);
    });
  }
}

interface Attempt {
  atMs: number;
  retries: number;
}
