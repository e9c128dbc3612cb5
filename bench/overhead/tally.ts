// The overhead bench's results: their shape, how the segments of one mode
// are summed (Tally), and the comparisons of the three Envoys in a cell.
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

export interface LatencySummary {
  p50: number;
  p99: number;
  mean: number;
  samples: number;
}

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

/** How the upstream ports shared the measured requests. */
export interface Spread {
  endpoints: number;
  endpointsHit: number;
  minHits: number;
  maxHits: number;
  totalHits: number;
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
  latencyMs: LatencySummary;
  cpu: CpuPerRequest;
  spread: Spread;
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
  /** with - without, from the latency measurement. */
  addedLatencyMs: { p50: number; p99: number; mean: number };
  /** with - floor, from the latency measurement. */
  addedLatencyOverFloorMs: { p50: number; p99: number; mean: number };
  /** with / without requests per second at saturation. */
  throughputRatio: number;
  /** with / floor requests per second at saturation. */
  throughputRatioToFloor: number;
  /** floor / without requests per second at saturation: what any buffering Wasm filter costs. */
  floorThroughputRatio: number;
  /** with - without Envoy CPU per request at saturation. */
  addedEnvoyCpuUsPerRequest: number | null;
  /** with - floor Envoy CPU per request at saturation. */
  addedEnvoyCpuUsOverFloor: number | null;
  /** floor - without Envoy CPU per request at saturation. */
  floorAddedEnvoyCpuUsPerRequest: number | null;
}

/** Our filter's added Envoy CPU per response, streamed (SSE) against JSON, at one endpoint count and body size. */
export interface StreamingCost {
  endpoints: number;
  bodyBytes: number;
  chunks: number;
  overPlain: { jsonUs: number | null; sseUs: number | null; ratio: number | null };
  overFloor: { jsonUs: number | null; sseUs: number | null; ratio: number | null };
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
  streaming: StreamingCost | null;
  native: NativeTiming[];
  /** Deterministic: counted on the proxy-wasm emulator, the same on every run of the same build. */
  counts: RequestCounts;
  /** Facts read from assembly/gateway/request-path.ts and response-path.ts, not measured. */
  filterHotPath: string[];
}

const perRequestUs = (seconds: number | null, requests: number) =>
  seconds === null || requests === 0 ? null : (seconds * 1e6) / requests;

/** Sums the segments of one mode of one measurement. */
export class Tally {
  private readonly runs: RunResult[] = [];
  private readonly hits: number[];

  constructor(endpoints: number) {
    this.hits = new Array<number>(endpoints).fill(0);
  }

  add(run: RunResult, hits: number[]): void {
    this.runs.push(run);
    hits.forEach((h, i) => (this.hits[i] += h));
  }

  summary(connections: number): RunStats {
    const sum = (f: (r: RunResult) => number) => this.runs.reduce((a, r) => a + f(r), 0);
    const sumCpu = (f: (r: RunResult) => number | null) =>
      this.runs.some((r) => f(r) === null) ? null : sum((r) => f(r)!);
    const requests = sum((r) => r.requests);
    const durationS = sum((r) => r.durationS);
    const sorted = Float64Array.from(this.runs.flatMap((r) => r.latenciesMs)).sort();
    const machine = sumCpu((r) => r.cpu.machine);
    const envoy = sumCpu((r) => r.cpu.envoy);
    const upstream = sumCpu((r) => r.cpu.upstream);
    const loadgen = sum((r) => r.cpu.loadgen);
    const busy = (seconds: number | null) => (seconds === null || durationS === 0 ? null : seconds / durationS);
    return {
      connections,
      segments: this.runs.length,
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
        endpoints: this.hits.length,
        endpointsHit: this.hits.filter((h) => h > 0).length,
        minHits: Math.min(...this.hits),
        maxHits: Math.max(...this.hits),
        totalHits: this.hits.reduce((a, b) => a + b, 0),
      },
    };
  }
}

const diff = (a: number | null, b: number | null) => (a === null || b === null ? null : a - b);

function latencyDiff(a: ModeStats, b: ModeStats) {
  return {
    p50: a.latency.latencyMs.p50 - b.latency.latencyMs.p50,
    p99: a.latency.latencyMs.p99 - b.latency.latencyMs.p99,
    mean: a.latency.latencyMs.mean - b.latency.latencyMs.mean,
  };
}

export function compareModes(
  bodyBytes: number,
  endpoints: number,
  response: ResponseKind,
  withFilter: ModeStats,
  floorFilter: ModeStats,
  withoutFilter: ModeStats,
): OverheadCell {
  const rate = (m: ModeStats) => m.saturation.requestsPerS;
  const cpu = (m: ModeStats) => m.saturation.cpu.envoyUs;
  return {
    bodyBytes,
    endpoints,
    response,
    withFilter,
    floorFilter,
    withoutFilter,
    addedLatencyMs: latencyDiff(withFilter, withoutFilter),
    addedLatencyOverFloorMs: latencyDiff(withFilter, floorFilter),
    throughputRatio: rate(withFilter) / rate(withoutFilter),
    throughputRatioToFloor: rate(withFilter) / rate(floorFilter),
    floorThroughputRatio: rate(floorFilter) / rate(withoutFilter),
    addedEnvoyCpuUsPerRequest: diff(cpu(withFilter), cpu(withoutFilter)),
    addedEnvoyCpuUsOverFloor: diff(cpu(withFilter), cpu(floorFilter)),
    floorAddedEnvoyCpuUsPerRequest: diff(cpu(floorFilter), cpu(withoutFilter)),
  };
}

/** The streamed cell against the JSON cell of the same endpoint count and body; null without a streamed cell. */
export function streamingCost(cells: OverheadCell[], chunks = 0): StreamingCost | null {
  const sse = cells.find((c) => c.response === "sse");
  const json = sse && cells.find((c) => c.response === "json" && c.endpoints === sse.endpoints && c.bodyBytes === sse.bodyBytes);
  if (!sse || !json) return null;
  const ratio = (a: number | null, b: number | null) => (a === null || b === null || b <= 0 ? null : a / b);
  const pair = (f: (c: OverheadCell) => number | null) => ({ jsonUs: f(json), sseUs: f(sse), ratio: ratio(f(sse), f(json)) });
  return {
    endpoints: sse.endpoints,
    bodyBytes: sse.bodyBytes,
    chunks,
    overPlain: pair((c) => c.addedEnvoyCpuUsPerRequest),
    overFloor: pair((c) => c.addedEnvoyCpuUsOverFloor),
  };
}
