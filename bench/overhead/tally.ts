// The overhead bench's results: their shape, and how the segments of one
// mode are summed. The report compares the three Envoys of a cell.
import type { RunResult } from "./load.js";
import type { NativeTiming } from "./native.js";
import type { RequestCounts } from "./counts.js";
import { nearestRank } from "../percentiles.js";

/** Envoy with our filter, with the floor filter, and with no filter. */
export type Mode = "with" | "floor" | "without";
export const MODES: Mode[] = ["with", "floor", "without"];
export const MODE_LABELS: Record<Mode, string> = { with: "our filter", floor: "floor filter", without: "no filter" };
/** What the upstream answers: one JSON body, or an SSE stream of many chunks ending in usage. */
export type ResponseKind = "json" | "sse";

export interface CpuPerRequest {
  /** Envoy's CPU time (all its threads) per request; null without /proc. */
  envoyUs: number | null;
  /** The upstream + snapshot-server child. */
  upstreamUs: number | null;
  /** autocannon, i.e. the benchmark process itself. */
  loadgenUs: number;
  /** Average busy cores of the whole machine during the runs. */
  machineBusyCores: number | null;
  /** Of those, cores busy outside Envoy, the upstream and the load generator: disturbance from elsewhere. */
  otherBusyCores: number | null;
}

/** One mode of one measurement, summed over its alternating segments. */
export interface RunStats {
  connections: number;
  segments: number;
  durationS: number;
  requests: number;
  ok: number;
  non2xx: number;
  errors: number;
  timeouts: number;
  requestsPerS: number;
  latencyMs: { p50: number; p99: number; mean: number; samples: number };
  cpu: CpuPerRequest;
  /** How the upstream ports shared the measured requests. */
  spread: { endpoints: number; endpointsHit: number; minHits: number; maxHits: number; totalHits: number };
}

export interface ModeStats {
  /** Few connections, closed loop: the latency one request sees on an idle proxy. */
  latency: RunStats;
  /** Many connections: throughput at saturation. */
  saturation: RunStats;
}

export interface OverheadCell {
  bodyBytes: number;
  endpoints: number;
  response: ResponseKind;
  withFilter: ModeStats;
  /** The minimal buffering filter (assembly/floor-filter.ts). */
  floorFilter: ModeStats;
  withoutFilter: ModeStats;
}

export interface OverheadReport {
  command: string;
  startedAt: string;
  elapsedS: number;
  machine: { cpus: number; cpuModel: string; memoryGiB: number; platform: string; node: string; envoy: string };
  settings: {
    /** Measured seconds per mode and measurement, split over the segments of that mode. */
    durationS: number;
    /** Discarded load on each freshly started Envoy, before any measurement. */
    startupWarmupS: number;
    /** Discarded run before every measured segment. */
    warmupS: number;
    /** Segment order per measurement, e.g. with, floor, without, without, floor, with. */
    order: Mode[];
    latencyConnections: number;
    saturationConnections: number;
    envoyConcurrency: number;
    loadGenerator: string;
    bodySizes: number[];
    endpointCounts: number[];
    /** The endpoint count with a streamed cell too; 0 for none. */
    streamedAt: number;
    /** Content chunks in the streamed answer (plus finish, usage and [DONE] events). */
    streamChunks: number;
  };
  cells: OverheadCell[];
  native: NativeTiming[];
  /** Deterministic: counted on the proxy-wasm emulator, the same on every run of the same build. */
  counts: RequestCounts;
  /** Facts read from assembly/gateway/request-path.ts and response-path.ts, not measured. */
}

const perRequestUs = (seconds: number | null, requests: number) =>
  seconds === null || requests === 0 ? null : (seconds * 1e6) / requests;

/** Sums the segments of one mode of one measurement: their runs, and each upstream port's hits. */
export function runStats(connections: number, runs: readonly RunResult[], hits: readonly number[]): RunStats {
  const sum = (f: (r: RunResult) => number) => runs.reduce((a, r) => a + f(r), 0);
  const sumCpu = (f: (r: RunResult) => number | null) => (runs.some((r) => f(r) === null) ? null : sum((r) => f(r)!));
  const requests = sum((r) => r.requests);
  const durationS = sum((r) => r.durationS);
  const sorted = Float64Array.from(runs.flatMap((r) => r.latenciesMs)).sort();
  const machine = sumCpu((r) => r.cpu.machine);
  const envoy = sumCpu((r) => r.cpu.envoy);
  const upstream = sumCpu((r) => r.cpu.upstream);
  const loadgen = sum((r) => r.cpu.loadgen);
  const busy = (seconds: number | null) => (seconds === null || durationS === 0 ? null : seconds / durationS);
  return {
    connections,
    segments: runs.length,
    durationS,
    requests,
    ok: sum((r) => r.ok),
    non2xx: sum((r) => r.non2xx),
    errors: sum((r) => r.errors),
    timeouts: sum((r) => r.timeouts),
    requestsPerS: durationS > 0 ? requests / durationS : 0,
    latencyMs: {
      p50: nearestRank(sorted, 0.5),
      p99: nearestRank(sorted, 0.99),
      mean: sorted.length ? sorted.reduce((a, b) => a + b, 0) / sorted.length : NaN,
      samples: sorted.length,
    },
    cpu: {
      envoyUs: perRequestUs(envoy, requests),
      upstreamUs: perRequestUs(upstream, requests),
      loadgenUs: perRequestUs(loadgen, requests) ?? 0,
      machineBusyCores: busy(machine),
      // Clamped: the separate /proc reads can make the difference dip a little below zero.
      otherBusyCores: busy(
        machine === null || envoy === null || upstream === null ? null : Math.max(0, machine - envoy - upstream - loadgen),
      ),
    },
    spread: {
      endpoints: hits.length,
      endpointsHit: hits.filter((h) => h > 0).length,
      minHits: Math.min(...hits),
      maxHits: Math.max(...hits),
      totalHits: hits.reduce((a, b) => a + b, 0),
    },
  };
}
