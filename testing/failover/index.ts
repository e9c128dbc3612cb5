// `npm run bench -- --failover`: how many errors a client sees when a pod
// fails under 20 req/s. Each phase starts a real stack (fake pods in this
// process, the aggregator, Envoy with the filter), replays the same seeded
// arrivals through the openai client and injects one fault part-way:
//   pod-killed                  the busiest pod crashes (Pod.close());
//   pod-500                     a pod answers 500 while its /metrics looks idle;
//   aggregator-then-pod-killed  the aggregator stops, the filter's view goes
//                               stale (blind routing), then the busiest pod crashes;
//   pod-hung                    a pod reads completions and never answers, /metrics idle;
//   pod-breaking-responses      a pod sends a 200 and cuts the connection part-way;
//   pod-stalling-streams        a pod sends a stream's first event, then nothing.
import { cpus } from "node:os";
import { join } from "node:path";
import { stringify } from "yaml";
import { parseGatewayConfig, type GatewayConfig } from "../../host/config.js";
import { envoyVersion, findEnvoy } from "../../host/envoy/index.js";
import { startFleet, type FaultMode, type Fleet, type Pod } from "../fakeserver/index.js";
import { packageVersion } from "../../host/paths.js";
import { startStack, type Stack } from "../launcher/stack.js";
import { ClusterWatch } from "../launcher/envoy-watch.js";
import { startFaultyPod, type Deadlines, type FaultyPod } from "./faulty-pod.js";
import { MAX_OUTPUT_TOKENS, MIN_OUTPUT_TOKENS, planArrivals, runLoad, type PlannedRequest } from "./load.js";
import {
  failoverMarkdown, GRACE_MS, LEDGER_GRACE_MS, PHASES, QUIET_MS, summarisePhase,
  type FailoverReport, type FailoverSettings, type PhaseName, type PhaseReport, type PhaseRun,
} from "./report.js";

export { failoverMarkdown, PHASES };
export type { FailoverReport, PhaseReport, PhaseName } from "./report.js";

export interface FailoverOptions {
  /** A few seconds per phase instead of 30. */
  smoke?: boolean;
  seed?: number;
  /** Progress lines, without a prefix. */
  onProgress?: (line: string) => void;
  /** Each phase's Envoy log goes to DIR/envoy-<phase>.log. */
  logDir?: string;
  /** The command line recorded in the report. */
  command?: string;
}

const COMMAND = "npm run bench -- --failover";
const DEFAULT_SEED = 1;
const RATE_PER_S = 20;
const PODS = 4;
const POOL = "llama";
const MODEL = "llama-3.1-8b";
const ENVOY_CONCURRENCY = 2;
const FULL = { durationS: 30, faultAtS: 10, drainLimitS: 30 };
// The third phase needs the aggregator gone for longer than the view's age bound before its fault;
// a hung pod's requests wait out the drain limit unless the gateway gives up on them first.
const SMOKE = { durationS: 7, faultAtS: 4, drainLimitS: 10 };
const READY_TIMEOUT_MS = 15_000;

/** The phases whose fault is the pod's own fault mode. */
const POD_FAULTS: Partial<Record<PhaseName, FaultMode>> = {
  "pod-hung": "hang",
  "pod-breaking-responses": "break-streams",
  "pod-stalling-streams": "stall-stream",
};

/**
 * How long a pod may keep the gateway waiting: the gateway's config holds
 * pods to these, and the faulty pod's front judges every attempt by them.
 */
const DEADLINES: Deadlines = { firstByteMs: 2_000, streamIdleMs: 2_000 };

/**
 * Default gateway settings but admission: a killed pod's load lands on the
 * others, and 429s would hide what failover alone does to clients. And
 * DEADLINES. Only the ports are the OS's choice.
 */
function gatewayConfig(endpoints: string[]): GatewayConfig {
  return parseGatewayConfig(
    stringify({
      gateway: { host: "127.0.0.1", port: 0, adminPort: 0 },
      aggregator: { host: "127.0.0.1", port: 0, metricsPort: 0 },
      profiles: { latency: { admission: { enabled: false }, deadlines: DEADLINES } },
      pools: [{ name: POOL, baseModel: MODEL, endpoints }],
    }),
    "failover bench",
  );
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Every pod fresh in the aggregator's view and one completion through the gateway. */
async function waitReady(stack: Stack): Promise<void> {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  let last = "";
  while (Date.now() < deadline) {
    const endpoints = stack.aggregator.current().pools[0]?.endpoints ?? [];
    if (endpoints.length === PODS && endpoints.every((e) => e.fresh)) {
      const res = await fetch(`${stack.gatewayUrl}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "ready?" }], max_tokens: 2 }),
      }).catch((err: Error) => err);
      if (!(res instanceof Error) && res.status === 200) return;
      last = res instanceof Error ? res.message : `${res.status} ${await res.text()}`;
    }
    await sleep(100);
  }
  throw new Error(`the gateway did not become ready within ${READY_TIMEOUT_MS} ms (last: ${last || "pods not fresh"})`);
}

/** Counters only (gauges have no meaningful delta) of the pool's cluster, the filter and the listener's 5xx. */
async function counters(stack: Stack): Promise<Record<string, number>> {
  const filter = encodeURIComponent(`^(cluster\\.llm_gateway_pool_${POOL}\\.|wasmcustom\\.llm_gateway\\.|http\\.llm_gateway\\.downstream_rq_5xx$)`);
  const res = await fetch(`${stack.envoy.adminUrl}/stats?format=json&type=Counters&filter=${filter}`);
  if (res.status !== 200) throw new Error(`GET /stats returned ${res.status}`);
  const out: Record<string, number> = {};
  for (const st of ((await res.json()) as { stats: Array<{ name?: string; value?: unknown }> }).stats) {
    // The filter's labelled counters (name;pool=...;model_server=...) count into their metric's total.
    if (st.name !== undefined && typeof st.value === "number") {
      const name = st.name.split(";")[0];
      out[name] = (out[name] ?? 0) + st.value;
    }
  }
  return out;
}

function deltas(before: Record<string, number>, after: Record<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(after)) if (v - (before[k] ?? 0) !== 0) out[k] = v - (before[k] ?? 0);
  return out;
}

async function healthStatus(stack: Stack): Promise<string> {
  const res = await fetch(`${stack.gatewayUrl}/health`).catch(() => null);
  if (!res) return "no answer";
  return (((await res.json().catch(() => ({}))) as { status?: string }).status) ?? `HTTP ${res.status}`;
}

/** The pod with the most requests in its engine: a kill there cuts the most work. */
function busiest(pods: readonly Pod[]): Pod {
  const load = (p: Pod) => p.engine.metrics().numRunning + p.engine.metrics().numWaiting;
  return pods.reduce((best, p) => (load(p) > load(best) ? p : best));
}

interface PhaseContext {
  phase: PhaseName;
  plan: PlannedRequest[];
  faultAtMs: number;
  aggregatorLeadMs: number;
  drainLimitS: number;
  progress: (line: string) => void;
  logDir?: string;
}

async function runPhase(ctx: PhaseContext): Promise<PhaseRun> {
  const { phase, progress } = ctx;
  const cleanups: Array<() => Promise<void>> = [];
  let t0 = performance.now();
  const clock = () => performance.now() - t0;
  try {
    progress(`${phase}: starting ${PODS} pods, the aggregator and Envoy`);
    const fleet: Fleet = await startFleet(Array.from({ length: PODS }, (_, i) => ({ name: `${POOL}-${i}`, model: MODEL })));
    cleanups.push(() => fleet.close());
    let faulty: FaultyPod | null = null;
    const podFault = POD_FAULTS[phase];
    if (phase === "pod-500" || podFault) {
      faulty = await startFaultyPod(fleet.pods[PODS - 1], clock, DEADLINES);
      cleanups.push(faulty.close);
    }
    const addressOf = (p: Pod) => (faulty?.name === p.name ? faulty.address : p.address);
    const stack = await startStack(gatewayConfig(fleet.pods.map(addressOf)), {
      metricsPort: false,
      concurrency: ENVOY_CONCURRENCY,
      envoyLogFile: ctx.logDir ? join(ctx.logDir, `envoy-${phase}.log`) : undefined,
    });
    cleanups.push(() => stack.close());
    await waitReady(stack);

    const watch = new ClusterWatch(stack.envoy.adminUrl, POOL, clock);
    const before = await counters(stack);
    t0 = performance.now();
    watch.start();

    let faultAtMs = NaN;
    let pod = faulty?.name ?? "";
    let address = faulty?.address ?? "";
    let engineAtFault: PhaseRun["engineAtFault"] = null;
    let aggregatorClosedAtMs: number | null = null;
    let healthAtFault = "";
    const kill = async () => {
      const victim = busiest(fleet.pods);
      pod = victim.name;
      address = addressOf(victim);
      const m = victim.engine.metrics();
      engineAtFault = { running: m.numRunning, waiting: m.numWaiting };
      faultAtMs = clock();
      await victim.close();
      progress(`${phase}: killed ${pod} at ${(faultAtMs / 1000).toFixed(1)} s (${m.numRunning} running, ${m.numWaiting} waiting)`);
    };
    const fault = async () => {
      healthAtFault = await healthStatus(stack);
      await watch.sample(); // the baseline for attempts after the fault
      if (podFault) {
        faultAtMs = clock();
        fleet.pod(pod).setFault(podFault);
        progress(`${phase}: ${pod} in fault mode ${podFault} from ${(faultAtMs / 1000).toFixed(1)} s`);
      } else if (faulty) {
        faultAtMs = clock();
        faulty.break();
        progress(`${phase}: ${pod} answers 500 from ${(faultAtMs / 1000).toFixed(1)} s`);
      } else {
        await kill();
      }
    };
    const events: Array<Promise<void>> = [];
    const at = (ms: number, action: () => Promise<void>) => {
      const done = new Promise<void>((resolve, reject) => setTimeout(() => action().then(resolve, reject), Math.max(0, ms - clock())));
      done.catch(() => {}); // awaited after the load; until then a failure must not count as unhandled
      events.push(done);
    };
    if (phase === "aggregator-then-pod-killed") {
      at(ctx.faultAtMs - ctx.aggregatorLeadMs, async () => {
        aggregatorClosedAtMs = clock();
        await stack.aggregator.close();
        progress(`${phase}: aggregator stopped at ${(aggregatorClosedAtMs / 1000).toFixed(1)} s`);
      });
    }
    at(ctx.faultAtMs, fault);

    const records = await runLoad({
      baseUrl: stack.gatewayUrl,
      model: MODEL,
      requests: ctx.plan,
      clock,
      drainLimitMs: ctx.drainLimitS * 1000,
      onProgress: (line) => progress(`${phase}: ${line}`),
    });
    await Promise.all(events);
    await watch.stop();
    const after = await counters(stack);
    const failed = records.filter((r) => r.error).length;
    progress(`${phase}: ${records.length} requests, ${failed} client errors`);
    const attempts = faulty ? faulty.attempts().filter((a) => a.atMs >= faultAtMs) : [];
    const failures = attempts.filter((a) => a.failedAtMs !== null);

    return {
      phase,
      pod,
      faultAtMs,
      aggregatorClosedAtMs,
      engineAtFault,
      healthAtFault,
      records,
      attemptTimesMs: faulty ? attempts.map((a) => a.atMs) : watch.attemptTimesAfter(address, faultAtMs),
      failedRequests: failures.flatMap((a) => (a.request === null ? [] : [a.request])),
      attemptsCountedBy: faulty ? "pod" : "envoy",
      // A crash shows at once: refused connections, reset requests.
      firstFailureAtMs: faulty ? (failures.length > 0 ? Math.min(...failures.map((a) => a.failedAtMs!)) : null) : faultAtMs,
      envoyEjections: watch.ejectionsAfter(address, faultAtMs),
      filterEjections: watch.filterEjectionsAfter(faultAtMs),
      envoyCounters: deltas(before, after),
    };
  } finally {
    for (const stop of cleanups.reverse()) await stop().catch(() => {});
  }
}



export async function runFailover(opts: FailoverOptions = {}): Promise<FailoverReport> {
  const started = Date.now();
  const progress = opts.onProgress ?? ((line: string) => process.stderr.write(`[failover] ${line}\n`));
  const { durationS, faultAtS, drainLimitS } = opts.smoke ? SMOKE : FULL;
  const seed = opts.seed ?? DEFAULT_SEED;
  const defaults = gatewayConfig(["127.0.0.1:1"]);
  // Long enough for the view to be stale on every worker when the pod dies.
  const aggregatorLeadMs = Math.min(faultAtS * 1000, defaults.gateway.staleView.maxAgeMs + defaults.aggregator.heartbeatMs);
  const settings: FailoverSettings = {
    seed,
    ratePerS: RATE_PER_S,
    durationS,
    faultAtS,
    aggregatorLeadS: aggregatorLeadMs / 1000,
    pods: PODS,
    outputTokens: [MIN_OUTPUT_TOKENS, MAX_OUTPUT_TOKENS],
    envoyConcurrency: ENVOY_CONCURRENCY,
    drainLimitS,
    graceMs: GRACE_MS,
    ledgerGraceMs: LEDGER_GRACE_MS,
    quietMs: QUIET_MS,
    deadlines: DEADLINES,
    gateway: {
      staleViewMaxAgeMs: defaults.gateway.staleView.maxAgeMs,
      staleViewPolicy: defaults.gateway.staleView.policy,
      ejectAfterFailures: defaults.gateway.passiveHealth.ejectAfterFailures,
      ejectMs: defaults.gateway.passiveHealth.ejectMs,
      staleAfterMs: defaults.aggregator.staleAfterMs,
      scrapeIntervalMs: defaults.aggregator.scrapeIntervalMs,
    },
  };
  const plan = planArrivals(seed, RATE_PER_S, durationS);
  const phases: PhaseReport[] = [];
  for (const phase of PHASES) {
    const run = await runPhase({ phase, plan, faultAtMs: faultAtS * 1000, aggregatorLeadMs, drainLimitS, progress, logDir: opts.logDir });
    phases.push(summarisePhase(run, settings));
  }
  const cpu = cpus();
  return {
    command: opts.command ?? COMMAND,
    startedAt: new Date(started).toISOString(),
    elapsedS: (Date.now() - started) / 1000,
    smoke: opts.smoke ?? false,
    machine: { cpus: cpu.length, cpuModel: cpu[0]?.model.trim() ?? "unknown", node: process.version, envoy: envoyVersion(findEnvoy()), openai: `openai ${packageVersion("openai")}` },
    settings,
    phases,
  };
}
