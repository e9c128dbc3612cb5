// The interface every routing policy implements for the simulator.
import type { Scenario } from "../scenario.js";
import type { EventQueue } from "../sim/events.js";
import type { SimFleet } from "../sim/fleet.js";
import type { StateSharing } from "../sim/state-sharing.js";
import type { Trace, TraceRequest } from "../sim/workload.js";

/** One request as a policy may look at it; the texts are built only if asked for. */
export interface RouteRequest {
  request: TraceRequest;
  /** Prompt text as the engine sees it. */
  readonly prompt: string;
  /** The JSON body the client sent. */
  readonly body: string;
}

/**
 * A pod, or the gateway's own answer. A 429 may carry a Retry-After (s),
 * which the simulated client obeys once; only policies that admit (ours)
 * refuse, the baselines never do.
 */
export type Decision = { pod: number } | { status: number; message: string; retryAfterS?: number };

/** What route() may answer: a decision now, or `held` (the policy calls its release handler with one later). */
export type RouteOutcome = Decision | { held: true };

/** Called by a policy with the decision for a request it held. */
export type ReleaseHandler = (request: TraceRequest, decision: Decision, t: number) => void;

/** What a policy can see and use. Metric feeds schedule themselves on `queue`. */
export interface PolicyEnv {
  scenario: Scenario;
  trace: Trace;
  fleet: SimFleet;
  queue: EventQueue;
  /** This gateway's seed (the run's, for the first replica); a policy derives its own random streams from it. */
  seed: number;
  /** Which of the run's gateway replicas this policy instance is (bench/sim/replicas.ts). */
  replica: ReplicaEnv;
}

/** A gateway replica's place in the run, and what it shares with the other replicas. */
export interface ReplicaEnv {
  /** 0 .. count - 1. */
  index: number;
  count: number;
  /** The run's seed, for the parts every replica shares. */
  runSeed: number;
  /** A component every replica of the run shares (the control plane), made by the first that asks for `key`. */
  runWide<T>(key: string, make: () => T): T;
  /** How the replicas exchange what a scrape does not show. */
  sharing: StateSharing;
}

export interface Policy {
  /** Time the decision adds between the request's arrival and its reaching the pod. */
  readonly decisionDelayMs: number;
  route(req: RouteRequest, now: number): RouteOutcome;
  /** Policies that hold requests (ours) take the handler for their later decisions. */
  onRelease?(handler: ReleaseHandler): void;
}

export interface PolicySpec {
  name: string;
  description: string;
  create(env: PolicyEnv): Policy | Promise<Policy>;
}
