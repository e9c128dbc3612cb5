// The overhead report's shape, how runs are summed into it, and its markdown.
import type { RunResult } from "./load.js";
import type { NativeTiming } from "./native.js";
import { countsMarkdown, type RequestCounts } from "./counts.js";
import { CHAT_PATH } from "./workload.js";
import { nearestRank } from "../percentiles.js";

export type { NativeTiming } from "./native.js";

/** Envoy with our filter, with the floor filter, and with no filter. */
export type Mode = "with" | "floor" | "without";
export const MODES: Mode[] = ["with", "floor", "without"];
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
  /** Facts read from assembly/gateway/filter.ts, not measured. */
  filterHotPath: string[];
}

export const FILTER_HOT_PATH: string[] = [
  "Wasm → host calls per routed request (counted in the table above; docs/host-calls.md has each kind of request) — " +
    "`proxy_get_header_map_pairs` (all request headers, once), `proxy_get_buffer_bytes` (the whole buffered body, once, " +
    "at end of stream), `proxy_get_shared_data` + `proxy_set_shared_data` (the in-flight table: read, add this request " +
    "and any releases waiting in this worker, compare-and-swap write), `proxy_set_header_map_pairs` (every routing header " +
    "in one call); when the stream ends `proxy_get_property` for response.code and upstream.address (passive health and the " +
    "drain rate) and, only when the answer did not end whole, the response flags. One decision in 16 is timed (two clock " +
    "reads). The release of the in-flight count goes out with the worker's next write or its 20 ms tick. " +
    "Counters (per class, reason, pod) are kept in Wasm memory and handed over on the tick. " +
    "A canary split adds `proxy_set_buffer_bytes`; a request that finds no room reads and writes the refusal memory; " +
    "an answer's body adds one read of each chunk's last 2 KiB (where usage is).",
  "Host → Wasm calls per request: `proxy_on_context_create`, `proxy_on_request_headers`, `proxy_on_request_body` " +
    "once per received body chunk (StopIterationAndBuffer until end of stream), `proxy_on_response_body` per answer chunk, " +
    "`proxy_on_done`, `proxy_on_delete`, and the module's `malloc` for what the host hands over (header pairs, body, " +
    "shared-data values, properties).",
  "Copies: the header map is serialised once and the body copied once into Wasm memory; both are scanned in place, " +
    "and the prompt's first 16 KiB are hashed in place for the prefix keys. The model name is the only value decoded to a string.",
  "Scoring: a pool of up to 32 usable pods is scored whole; a larger one over a shortlist (the best load estimates, kept " +
    "in max-trees updated only for pods whose in-flight counts changed, plus prefix and adapter holders), so a decision " +
    "at 1000 pods costs about what one at 64 does (docs/scorers.md, large pools).",
  "Off the request path: every worker's root context polls a 32-byte snapshot cell and the health ledger in shared data " +
    "every 20 ms, and, when a profile scores prefixes or adapters, swaps routing decisions through the ~53 KiB prefix log.",
];

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

// Below this, "other" CPU is Envoy's idle twin, kernel threads and /proc sampling noise.
const DISTURBED_CORES = 0.1;

const kib = (bytes: number) => (bytes % 1024 === 0 ? `${bytes / 1024} KiB` : `${bytes} B`);
const ms = (v: number) => v.toFixed(3);
const signed = (v: number, digits: number) => (v >= 0 ? "+" : "") + v.toFixed(digits);
const us = (v: number | null) => (v === null ? "n/a" : v.toFixed(1));

const cellLabel = (c: OverheadCell) => (c.response === "sse" ? "SSE" : "JSON");
const MODE_LABELS: Record<Mode, string> = { with: "our filter", floor: "floor filter", without: "no filter" };

function failures(cells: OverheadCell[]): string[] {
  const out: string[] = [];
  for (const c of cells) {
    for (const [mode, stats] of [["with", c.withFilter], ["floor", c.floorFilter], ["without", c.withoutFilter]] as const) {
      for (const run of [stats.latency, stats.saturation]) {
        if (run.non2xx + run.errors > 0) {
          out.push(`${kib(c.bodyBytes)} × ${c.endpoints} endpoints, ${cellLabel(c)}, ${MODE_LABELS[mode]}, ${run.connections} connection(s): ` +
            `${run.non2xx} non-2xx, ${run.errors} errors (${run.timeouts} timeouts)`);
        }
      }
    }
  }
  return out;
}

const added = (v: number | null) => (v === null ? "n/a" : signed(v, 1));

export function overheadMarkdown(r: OverheadReport): string {
  const s = r.settings;
  const lines: string[] = [];
  lines.push("## Filter overhead", "");
  lines.push(`Command: \`${r.command}\` (${r.startedAt}, ${r.elapsedS.toFixed(0)} s in all)`, "");
  lines.push(
    `Three Envoys from one rendered envoy/gateway.yaml, in the same run: **ours** (the gateway filter, snapshot ` +
      `pushed by the real gRPC push server), the **floor** (assembly/floor-filter.ts in the gateway filter's place: it ` +
      `buffers the body until end of stream and sets one header, nothing else: what any buffering Wasm filter pays) and ` +
      `**plain** (no Wasm at all); floor and plain route ROUND_ROBIN over the same upstream ports. Instant upstream: ` +
      `node:http on one loopback port per endpoint, answering JSON, or for a streamed request (SSE) ${s.streamChunks} ` +
      `content events, a finish, a usage event and [DONE]. Load: ${s.loadGenerator}, POST ${CHAT_PATH} with a chat body ` +
      `padded to size. Each measurement alternates ${s.order.join(", ")} (${s.durationS} s measured per mode, each ` +
      `segment after a ${s.warmupS} s warm-up; every Envoy first gets ${s.startupWarmupS} s of load so V8 has tiered its code up).`,
    "",
  );

  lines.push(`### Added latency (${s.latencyConnections} connection, closed loop)`, "");
  lines.push("| Body | Endpoints | Answer | p50 plain (ms) | p50 floor | p50 ours | ours − plain | ours − floor | p99 plain | p99 floor | p99 ours |");
  lines.push("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
  for (const c of r.cells) {
    const [wo, f, w] = [c.withoutFilter, c.floorFilter, c.withFilter].map((m) => m.latency.latencyMs);
    lines.push(
      `| ${kib(c.bodyBytes)} | ${c.endpoints} | ${cellLabel(c)} | ${ms(wo.p50)} | ${ms(f.p50)} | ${ms(w.p50)} | ` +
        `${signed(c.addedLatencyMs.p50, 3)} | ${signed(c.addedLatencyOverFloorMs.p50, 3)} | ${ms(wo.p99)} | ${ms(f.p99)} | ${ms(w.p99)} |`,
    );
  }
  lines.push("");

  lines.push(`### Throughput and Envoy CPU at saturation (${s.saturationConnections} connections)`, "");
  lines.push(
    "| Body | Endpoints | Answer | req/s plain | floor | ours | floor/plain | ours/plain | ours/floor | " +
      "Envoy CPU µs/req plain | floor | ours | ours over plain | ours over floor | Envoy cores busy (plain / floor / ours) | " +
      "ports hit by ours (min–max req/port) |",
  );
  lines.push("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
  const cores = (v: number | null) => (v === null ? "n/a" : v.toFixed(2));
  const envoyCores = (run: RunStats) => (run.cpu.envoyUs === null ? null : (run.cpu.envoyUs * run.requestsPerS) / 1e6);
  for (const c of r.cells) {
    const [wo, f, w] = [c.withoutFilter, c.floorFilter, c.withFilter].map((m) => m.saturation);
    lines.push(
      `| ${kib(c.bodyBytes)} | ${c.endpoints} | ${cellLabel(c)} | ${wo.requestsPerS.toFixed(0)} | ${f.requestsPerS.toFixed(0)} | ` +
        `${w.requestsPerS.toFixed(0)} | ${c.floorThroughputRatio.toFixed(2)} | ${c.throughputRatio.toFixed(2)} | ` +
        `${c.throughputRatioToFloor.toFixed(2)} | ${us(wo.cpu.envoyUs)} | ${us(f.cpu.envoyUs)} | ${us(w.cpu.envoyUs)} | ` +
        `${added(c.addedEnvoyCpuUsPerRequest)} | ${added(c.addedEnvoyCpuUsOverFloor)} | ` +
        `${cores(envoyCores(wo))} / ${cores(envoyCores(f))} / ${cores(envoyCores(w))} | ` +
        `${w.spread.endpointsHit}/${w.spread.endpoints} (${w.spread.minHits}–${w.spread.maxHits}) |`,
    );
  }
  lines.push(
    "",
    `Envoy runs one worker: when its busy cores are near 1, that worker was the bottleneck and the ratio is the ` +
      `filter's cost on a proxy core; well below 1, the load generator or the upstream (same machine) limited ` +
      `throughput and the ratio understates it. Envoy CPU µs per request does not depend on that.`,
    "",
  );

  if (r.streaming) {
    const st = r.streaming;
    const ratio = (v: number | null) => (v === null ? "n/a" : `${v.toFixed(2)}×`);
    lines.push(`### Streaming (${kib(st.bodyBytes)} body, ${st.endpoints} endpoints, ${st.chunks}-chunk SSE answer)`, "");
    lines.push("| Added Envoy CPU per response | JSON answer (µs) | SSE answer (µs) | SSE / JSON |");
    lines.push("|---|---:|---:|---:|");
    lines.push(`| ours over plain | ${added(st.overPlain.jsonUs)} | ${added(st.overPlain.sseUs)} | ${ratio(st.overPlain.ratio)} |`);
    lines.push(`| ours over floor | ${added(st.overFloor.jsonUs)} | ${added(st.overFloor.sseUs)} | ${ratio(st.overFloor.ratio)} |`);
    lines.push(
      "",
      "The upstream writes each event separately; Envoy hands the filter what one socket read brings, so the filter " +
        "may see fewer data frames than events. The emulator counts below feed it one frame per event.",
      "",
    );
  }

  lines.push(...countsMarkdown(r.counts));

  lines.push("### Routing decision in the native build (build/native.wasm in Node)", "");
  lines.push("| Body | Endpoints | p50 (µs) | p99 (µs) | mean (µs) | decisions timed |");
  lines.push("|---|---:|---:|---:|---:|---:|");
  for (const n of r.native) {
    const label = n.endpoints === 1 ? "1 (no scoring)" : String(n.endpoints);
    lines.push(`| ${kib(n.bodyBytes)} | ${label} | ${n.p50Us.toFixed(2)} | ${n.p99Us.toFixed(2)} | ${n.meanUs.toFixed(2)} | ${n.decisions} |`);
  }
  lines.push(
    "",
    "Each decision scans the body, looks up the model and scores the pool (whole up to 32 usable pods, else its shortlist); the time also includes the native " +
      "build's JS↔Wasm boundary (body copied in, a JSON result string out and parsed) and a hrtime call.",
    "",
  );

  lines.push("### The filter's per-request work (read from assembly/gateway/filter.ts)", "");
  for (const fact of r.filterHotPath) lines.push(`- ${fact}`);
  lines.push("");

  const others = r.cells.flatMap((c) =>
    [c.withFilter, c.floorFilter, c.withoutFilter].flatMap((m) => [m.latency.cpu.otherBusyCores, m.saturation.cpu.otherBusyCores]),
  );
  const worstOther = Math.max(...others.map((o) => o ?? 0));
  if (worstOther > DISTURBED_CORES) {
    lines.push(
      `**Disturbed:** other processes on the machine kept up to ${worstOther.toFixed(2)} cores busy during a ` +
        `measured run; treat these figures with suspicion.`,
      "",
    );
  }

  const bad = failures(r.cells);
  if (bad.length > 0) {
    lines.push("### Failed requests", "");
    for (const b of bad) lines.push(`- ${b}`);
    lines.push("");
  }

  const m = r.machine;
  lines.push(
    `Machine: ${m.cpus} × ${m.cpuModel}, ${m.memoryGiB.toFixed(0)} GiB, ${m.platform}, Node ${m.node}, Envoy ${m.envoy} ` +
      `(--concurrency ${s.envoyConcurrency}). The load generator (this process), the upstream + snapshot server (one ` +
      `child process) and Envoy all share these ${m.cpus} cores over loopback, so they compete for CPU at saturation; ` +
      `numbers move a few percent between runs, and p99 at one connection by more.`,
  );
  return lines.join("\n") + "\n";
}
