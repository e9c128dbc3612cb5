// Live mode: a scenario, shortened, replayed in real time through real Envoys
// against a fake fleet or real llama.cpp servers. Each policy gets a fresh
// fleet and the same trace.
import { loadStep } from "../admission.js";
import type { PodSpec } from "../../testing/fakeserver/index.js";
import { PROFILES } from "../policies/profiles.js";
import { podEngineSettings, type Scenario } from "../scenario.js";
import { generateTrace } from "../sim/workload.js";
import { effectiveScenario, resultHeader, runDeadlineMs } from "../sim/simulator.js";
import { policyResult } from "../stats.js";
import type { PolicyResult, RunOptions, ScenarioResult } from "../types.js";
import { replay } from "./client.js";
import { startFakeFleet, type LiveFleet } from "./fleet-process.js";
import { startLlamacppFleet } from "./llamacpp-fleet.js";
import { liveGatewayConfig, startBaseline, startOurs, type Gateway, type LivePool } from "./gateways.js";
import type { GatewayConfig } from "../../host/config.js";
import { replicatedName, startOursReplicated } from "./replicas.js";

/** Real time is expensive: unless --duration says otherwise, replay this much of the trace... */
export const LIVE_DEFAULT_DURATION_S = 30;
/** ...or, for a scenario with a load step, up to the step's end and this long after it (no 429 should come then). */
export const LIVE_AFTER_STEP_S = 30;
/** Live runs stop waiting for stragglers sooner than simulated ones. */
const LIVE_DRAIN_LIMIT_S = 60;

interface LivePolicy {
  name: string;
  description: string;
  start(config: GatewayConfig, workers: number): Promise<Gateway>;
}

const defaultProfile = PROFILES[0];
export const OURS_LIVE = `ours:${defaultProfile.name}`;

export const LIVE_POLICIES: readonly LivePolicy[] = [
  { name: "round-robin", description: "Envoy's ROUND_ROBIN cluster, one per model", start: (c, w) => startBaseline(c, w, "ROUND_ROBIN") },
  { name: "least-request", description: "Envoy's LEAST_REQUEST cluster, one per model", start: (c, w) => startBaseline(c, w, "LEAST_REQUEST") },
  {
    name: OURS_LIVE,
    description: `Envoy + our Wasm filter fed by the aggregator; ${defaultProfile.description}`,
    start: (c, w) => startOurs(c, w),
  },
];

/** Ours with `envoys` Envoys behind a round-robin front. */
function withEnvoys(ours: LivePolicy, envoys: number): LivePolicy {
  return {
    name: replicatedName(ours.name, envoys),
    description: `${ours.description}; ${envoys === 1 ? "one Envoy" : `${envoys} Envoys sharing only the snapshot`}, behind a round-robin front Envoy`,
    start: (c, w) => startOursReplicated(c, w, envoys),
  };
}

/** Pod specs in the simulator's order and names, so per-pod counts line up with sim results. */
function podSpecs(scenario: Scenario, adapters: string[][]): PodSpec[] {
  return scenario.fleet.flatMap((group) => {
    const pool = scenario.models.findIndex((m) => m.name === group.model);
    return Array.from({ length: group.count }, (_, i) => ({
      name: `${group.name}-${i}`,
      model: group.model,
      adapters: adapters[pool],
      engineConfig: podEngineSettings(scenario, group),
    }));
  });
}

/** The live replay's default length: a step is replayed whole, with its aftermath. */
export function liveDurationS(base: Scenario): number {
  const step = loadStep(base);
  return Math.min(base.durationS, step ? step.stepEndS + LIVE_AFTER_STEP_S : LIVE_DEFAULT_DURATION_S);
}

export async function runLive(base: Scenario, opts: RunOptions = {}): Promise<ScenarioResult> {
  const scenario = effectiveScenario(
    { ...base, durationS: liveDurationS(base), drainLimitS: Math.min(base.drainLimitS, LIVE_DRAIN_LIMIT_S) },
    opts,
  );
  const trace = generateTrace(scenario, scenario.seed);
  const specs = podSpecs(scenario, trace.adapters);
  const podNames = specs.map((s) => s.name);
  const chosen = opts.policies?.length ? LIVE_POLICIES.filter((p) => opts.policies!.includes(p.name)) : LIVE_POLICIES;
  const selected = opts.envoys ? chosen.flatMap((p) => (p.name === OURS_LIVE ? opts.envoys!.map((n) => withEnvoys(p, n)) : [p])) : chosen;
  if (selected.length === 0) throw new Error(`no live policy among ${opts.policies!.join(", ")} (live: ${LIVE_POLICIES.map((p) => p.name).join(", ")})`);

  const policies: PolicyResult[] = [];
  for (const policy of selected) {
    const fleet: LiveFleet = opts.fleet === "llamacpp" ? await startLlamacppFleet(specs) : await startFakeFleet(specs);
    let gateway: Gateway | undefined;
    try {
      const pools: LivePool[] = scenario.models.map((m, i) => ({
        name: m.name,
        adapters: trace.adapters[i],
        endpoints: specs.filter((s) => s.model === m.name).map((s) => fleet.addresses.get(s.name)!),
        engine: fleet.engine,
      }));
      const config = liveGatewayConfig(scenario, pools, defaultProfile.weights);
      gateway = await policy.start(config, scenario.gateway.workers);
      const records = await replay(trace, {
        url: gateway.url,
        poolNames: scenario.models.map((m) => m.name),
      }, {
        drainLimitMs: scenario.drainLimitS * 1000,
        onProgress: (f) => opts.onProgress?.(policy.name, f),
      });
      const serverCache = await fleet.serverCache?.();
      policies.push(
        policyResult(
          { policy: policy.name, description: policy.description, podNames, durationS: scenario.durationS, deadlineMs: runDeadlineMs(scenario, trace), step: loadStep(scenario), serverCache },
          records,
        ),
      );
    } finally {
      await gateway?.stop();
      await fleet.stop();
    }
  }

  // Same header as a simulated run; the fleet's speeds are the scenario's.
  return { ...resultHeader(scenario, trace, "live"), ...(opts.fleet === "llamacpp" ? { pods: "llamacpp" as const } : {}), policies };
}
