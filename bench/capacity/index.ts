/**
 * A scenario's capacity, measured on its own request mix (lengths, adapters,
 * shared prefixes): its trace is replayed `multiple` times faster, enough to
 * keep every pod queued, through a policy; each pod's saturation throughput
 * is its completed requests over its own makespan (first arrival to its last
 * completion), summed per pod group and over the fleet. The mix decides how
 * much work a request is (adapter swaps, prefix-cache hits), and so does the
 * policy: a cache- or adapter-oblivious one (round-robin) measures what any
 * such router can get, the oracle what good placement can.
 */
import { selectPolicies } from "../policies/index.js";
import type { Scenario } from "../scenario.js";
import { replayPolicy } from "../sim/simulator.js";
import { generateTrace } from "../sim/workload.js";
import type { RunRecord } from "../types.js";

export const DEFAULT_MULTIPLE = 4;
export const DEFAULT_CAPACITY_POLICIES = ["round-robin", "oracle"];
/** A backlog of many minutes must drain, not time out. */
const DRAIN_LIMIT_S = 24 * 3600;
/** A pod that completed more than this share of the rate it was sent requests at was keeping up, not saturated. */
const SATURATED_BELOW = 0.8;

export interface GroupCapacity {
  /** Pod group name (scenario fleet), or "fleet" for the whole. */
  group: string;
  pods: number;
  completed: number;
  /** Sum of the pods' completed requests over their own makespans. */
  requestsPerS: number;
}

export interface PolicyCapacity {
  policy: string;
  groups: GroupCapacity[];
  fleet: GroupCapacity;
  /** Pods that kept up with what they were sent: their figures are a lower bound, not a capacity. */
  unsaturated: string[];
  errors: number;
}

export interface CapacityReport {
  scenario: string;
  seed: number;
  durationS: number;
  requests: number;
  /** The scenario's own average arrival rate. */
  offeredPerS: number;
  multiple: number;
  policies: PolicyCapacity[];
}

export interface CapacityOptions {
  multiple?: number;
  policies?: string[];
  onProgress?: (policy: string, fraction: number) => void;
}

const round2 = (x: number) => Math.round(x * 100) / 100;

interface PodRate {
  completed: number;
  /** Completed requests over the pod's makespan. */
  perS: number;
  /** Requests sent to the pod over the arrival window. */
  sentPerS: number;
}

function podRates(records: readonly RunRecord[], podNames: readonly string[], start: number, lastArrival: number): PodRate[] {
  const pods = podNames.length;
  const index = new Map(podNames.map((name, i) => [name, i]));
  const completed = new Array<number>(pods).fill(0);
  const sent = new Array<number>(pods).fill(0);
  const end = new Array<number>(pods).fill(start);
  for (const r of records) {
    const pod = index.get(r.servedBy ?? "");
    if (pod === undefined) continue;
    sent[pod]++;
    if (r.error !== undefined) continue;
    completed[pod]++;
    end[pod] = Math.max(end[pod], r.endMs!);
  }
  return completed.map((n, i) => ({
    completed: n,
    perS: end[i] > start ? (n * 1000) / (end[i] - start) : 0,
    sentPerS: lastArrival > start ? (sent[i] * 1000) / (lastArrival - start) : Infinity,
  }));
}

export async function measureCapacity(scenario: Scenario, opts: CapacityOptions = {}): Promise<CapacityReport> {
  const multiple = opts.multiple ?? DEFAULT_MULTIPLE;
  const own = generateTrace(scenario, scenario.seed);
  const trace = { ...own, requests: own.requests.map((r) => ({ ...r, arrivalMs: r.arrivalMs / multiple })) };
  const fast: Scenario = { ...scenario, durationS: scenario.durationS / multiple, drainLimitS: DRAIN_LIMIT_S };
  const start = trace.requests[0]?.arrivalMs ?? 0;
  const lastArrival = trace.requests.at(-1)?.arrivalMs ?? 0;

  const policies: PolicyCapacity[] = [];
  for (const spec of selectPolicies(opts.policies ?? DEFAULT_CAPACITY_POLICIES)) {
    const fleet = await replayPolicy(fast, trace, spec, scenario.seed, (f) => opts.onProgress?.(spec.name, f));
    const rates = podRates(fleet.records, fleet.pods.map((p) => p.name), start, lastArrival);
    let first = 0;
    const groups = scenario.fleet.map((g): GroupCapacity => {
      const mine = rates.slice(first, (first += g.count));
      return {
        group: g.name,
        pods: g.count,
        completed: mine.reduce((s, p) => s + p.completed, 0),
        requestsPerS: round2(mine.reduce((s, p) => s + p.perS, 0)),
      };
    });
    const total: GroupCapacity = {
      group: "fleet",
      pods: fleet.pods.length,
      completed: groups.reduce((s, g) => s + g.completed, 0),
      requestsPerS: round2(rates.reduce((s, p) => s + p.perS, 0)),
    };
    policies.push({
      policy: spec.name,
      groups,
      fleet: total,
      unsaturated: fleet.pods.filter((p) => rates[p.index].perS >= SATURATED_BELOW * rates[p.index].sentPerS).map((p) => p.name),
      errors: fleet.records.filter((r) => r.error !== undefined).length,
    });
  }
  return {
    scenario: scenario.name,
    seed: scenario.seed,
    durationS: scenario.durationS,
    requests: trace.requests.length,
    offeredPerS: round2(trace.requests.length / scenario.durationS),
    multiple,
    policies,
  };
}
