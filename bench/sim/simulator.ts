/**
 * The discrete-event simulator: replays a scenario's trace against a fleet of
 * engine models, once per policy, in virtual time. Every policy sees the same
 * requests at the same moments and the same scrape and tick phases; only its
 * own decisions differ. A run is a pure function of (scenario, seed, policy).
 */
import { loadStep } from "../admission.js";
import { selectPolicies, type PolicySpec } from "../policies/index.js";
import type { Scenario } from "../scenario.js";
import { policyResult } from "../stats.js";
import type { Mode, PolicyResult, RunOptions, ScenarioResult } from "../types.js";
import { EventQueue } from "./events.js";
import { SimFleet } from "./fleet.js";
import { SimClient } from "./client.js";
import { createGateways, SINGLE_GATEWAY, type ReplicaOptions } from "./replicas.js";
import { generateTrace, type Trace, type TraceRequest } from "./workload.js";

/** How often (in processed events) to report progress. */
const PROGRESS_EVERY = 4096;

/** Replays the trace through one policy until every request has finished or timed out; returns the fleet with its records. */
export async function replayPolicy(
  scenario: Scenario,
  trace: Trace,
  spec: PolicySpec,
  seed: number,
  onProgress?: (fraction: number) => void,
  replicas: ReplicaOptions = SINGLE_GATEWAY,
): Promise<SimFleet> {
  const queue = new EventQueue();
  const fleet = new SimFleet(scenario, trace.requests);
  const policy = await createGateways(spec, { scenario, trace, fleet, queue, seed }, replicas);
  const client = new SimClient(trace, policy, fleet, queue, seed);
  onProgress?.(0);
  const requests = trace.requests;
  const windowMs = scenario.durationS * 1000;

  // One arrival in the queue at a time keeps the heap small.
  let next = 0;
  const arrive = (t: number): void => {
    const request = requests[next++];
    if (next < requests.length) queue.at(requests[next].arrivalMs, arrive);
    client.send(request, t);
  };
  if (requests.length > 0) queue.at(requests[0].arrivalMs, arrive);

  // Once the last request is on its pod, the policies' views no longer matter: stop the feeds.
  let processed = 0;
  while (next < requests.length || client.pending > 0) {
    const t = queue.peekTime();
    fleet.advanceTo(t);
    queue.pop()!.fn(t);
    if (onProgress && ++processed % PROGRESS_EVERY === 0) onProgress(Math.min(1, t / windowMs));
  }
  fleet.timeOutRemaining(runDeadlineMs(scenario, trace));
  onProgress?.(1);
  return fleet;
}

/** When a run stops waiting: its last arrival plus the scenario's drain limit; a failed request counts as waiting until then. */
export function runDeadlineMs(scenario: Pick<Scenario, "drainLimitS">, trace: Trace): number {
  const requests = trace.requests;
  return (requests.length > 0 ? requests[requests.length - 1].arrivalMs : 0) + scenario.drainLimitS * 1000;
}

/** The scenario with the run options applied. */
export function effectiveScenario(scenario: Scenario, opts: RunOptions): Scenario {
  return { ...scenario, seed: opts.seed ?? scenario.seed, durationS: opts.durationS ?? scenario.durationS };
}

export async function runSim(base: Scenario, opts: RunOptions = {}): Promise<ScenarioResult> {
  const scenario = effectiveScenario(base, opts);
  const specs = selectPolicies(opts.policies);
  const trace = generateTrace(scenario, scenario.seed);
  const replicas: ReplicaOptions = {
    count: opts.replicas ?? 1,
    ...(opts.shareIntervalMs === undefined ? {} : { sharing: { intervalMs: opts.shareIntervalMs, oneWayMs: scenario.gateway.pushDelayMs } }),
  };
  const policies: PolicyResult[] = [];
  for (const spec of specs) {
    const fleet = await replayPolicy(scenario, trace, spec, scenario.seed, (f) => opts.onProgress?.(spec.name, f), replicas);
    const meta = { policy: spec.name, description: spec.description, podNames: fleet.pods.map((p) => p.name), durationS: scenario.durationS };
    policies.push(policyResult({ ...meta, deadlineMs: runDeadlineMs(scenario, trace), engines: fleet.engineTotals(), step: loadStep(scenario) }, fleet.records));
  }
  // One gateway is what every result had before replicas could be modelled: its result says nothing of them.
  const sharing = replicas.sharing ? `through the control plane (in flight, prefix placements, queue boards and the replicas' places, as built): every ${replicas.sharing.intervalMs} ms + ${replicas.sharing.oneWayMs} ms each way` : "none";
  const gateways = replicas.count > 1 ? { replicas: { count: replicas.count, front: "round-robin" as const, sharing } } : {};
  return { ...resultHeader(scenario, trace, "sim"), ...gateways, policies };
}

/** The parts of a result that depend only on the scenario and its trace, whatever the mode. */
export function resultHeader(scenario: Scenario, trace: Trace, mode: Mode): Omit<ScenarioResult, "policies"> {
  const n = trace.requests.length;
  return {
    scenario: scenario.name,
    description: scenario.description,
    mode,
    seed: scenario.seed,
    durationS: scenario.durationS,
    offered: {
      requests: n,
      ratePerS: Math.round((n / scenario.durationS) * 1000) / 1000,
      meanPromptTokens: mean(trace.requests, (r) => r.userTokens + (r.prefixGroup >= 0 ? scenario.sharedPrefix!.tokens : 0)),
      meanOutputTokens: mean(trace.requests, (r) => r.maxTokens),
    },
    fleet: scenario.fleet.flatMap((g) => Array.from({ length: g.count }, (_, i) => ({ pod: `${g.name}-${i}`, model: g.model, speed: g.speed }))),
  };
}

function mean(requests: readonly TraceRequest[], f: (r: TraceRequest) => number): number {
  return requests.length > 0 ? Math.round(requests.reduce((s, r) => s + f(r), 0) / requests.length) : 0;
}
