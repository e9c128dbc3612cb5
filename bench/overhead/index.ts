// `npm run bench -- --overhead`: what our Wasm filter costs on top of the same
// Envoy without it and on top of the floor (a minimal buffering Wasm filter,
// assembly/floor-filter.ts), against an instant upstream, for JSON answers and
// an SSE stream; the time of one routing decision in the native build; and
// counts that do not move with noise (host calls and Wasm instructions per
// request on the emulator). Envoy, the upstream and the load generator
// (autocannon, in this process) all run on this machine.
import { cpus, platform, release, totalmem } from "node:os";
import { envoyVersion, findEnvoy, renderEnvoyConfig } from "../../host/envoy/index.js";
import { startEnvoy, type EnvoyProcess } from "../../testing/launcher/envoy-process.js";
import { filterWasmPath, packageVersion } from "../../host/paths.js";
import { baselineEnvoyConfig } from "../baseline-envoy.js";
import { buildFloorFilter, floorEnvoyConfig } from "../floor-envoy.js";
import { countPerRequest } from "./counts.js";
import { runLoad, type LoadTarget, type RunResult } from "./load.js";
import { timeNativeDecisions } from "./native.js";
import { MODE_LABELS, MODES, runStats, type Mode, type OverheadCell, type OverheadReport, type ResponseKind, type RunStats } from "./tally.js";
import { startUpstream, type Upstream } from "./upstream.js";
import { BENCH_POOL, CHAT_PATH, chatBody, MIN_CHAT_BODY_BYTES, STREAM_CHUNKS } from "./workload.js";

export interface OverheadOptions {
  /** Measured seconds per mode (ours / floor / no filter) and measurement; default 5. */
  durationS?: number;
  /** Request body sizes in bytes; default 4 KiB and 64 KiB. */
  bodySizes?: number[];
  /** Endpoints in the snapshot (and upstream ports); default 8, 64, 1000. */
  endpointCounts?: number[];
  /** The endpoint count at which a streamed (SSE) answer is measured too; default 64 (else the first count); 0 for none. */
  streamedAt?: number;
  /** Progress lines, without a prefix; default: stderr, prefixed "[overhead] ". */
  onProgress?: (line: string) => void;
}

const COMMAND = "npm run bench -- --overhead";
// One connection, closed loop: each request crosses an otherwise idle proxy.
const LATENCY_CONNECTIONS = 1;
const SATURATION_CONNECTIONS = 16;
// On two cores, one Envoy worker leaves the other core to autocannon and the upstream.
const ENVOY_CONCURRENCY = 1;
// A-B-C-C-B-A: a linear drift over a measurement weighs on every mode alike.
const ORDER: Mode[] = ["with", "floor", "without", "without", "floor", "with"];
const MAX_ENDPOINTS = 5_000; // one listening socket each, in one child process
const ROUTABLE_TIMEOUT_MS = 15_000;
// The gateway's default body limit, raised if a bench body is larger.
const DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024;

function checkList(name: string, values: number[], min: number, max: number): number[] {
  if (values.length === 0 || values.some((v) => !Number.isInteger(v) || v < min || v > max)) {
    throw new Error(`${name} must be a non-empty list of integers in [${min}, ${max}], got ${JSON.stringify(values)}`);
  }
  return [...new Set(values)];
}

/** Posts the bench body until Envoy answers 200: the filter has its snapshot, the upstream is reachable. */
async function waitRoutable(url: string, body: string, what: string): Promise<void> {
  const deadline = Date.now() + ROUTABLE_TIMEOUT_MS;
  let last = "no answer";
  while (Date.now() < deadline) {
    try {
      const res = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body });
      const text = await res.text();
      if (res.status === 200) return;
      last = `${res.status} ${text.slice(0, 200)}`;
    } catch (err) {
      last = (err as Error).message;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${what} did not route a request within ${ROUTABLE_TIMEOUT_MS} ms (last: ${last})`);
}

interface Bench {
  upstream: Upstream;
  targets: Record<Mode, LoadTarget>;
  durationS: number;
  startupWarmupS: number;
  warmupS: number;
  progress: (line: string) => void;
}

async function measureCell(b: Bench, bodyBytes: number, response: ResponseKind): Promise<OverheadCell> {
  const body = chatBody(bodyBytes, response === "sse");
  const endpoints = b.upstream.addresses.length;
  const label = `${bodyBytes} B × ${endpoints} endpoints${response === "sse" ? `, SSE answer of ${STREAM_CHUNKS} chunks` : ""}`;

  const measure = async (what: string, connections: number): Promise<Record<Mode, RunStats>> => {
    const runs = Object.fromEntries(MODES.map((m) => [m, [] as RunResult[]])) as Record<Mode, RunResult[]>;
    const hits = Object.fromEntries(MODES.map((m) => [m, new Array<number>(endpoints).fill(0)])) as Record<Mode, number[]>;
    const segmentS = b.durationS / ORDER.filter((m) => m === "with").length;
    for (const mode of ORDER) {
      const target = b.targets[mode];
      await runLoad(target, { body, connections, durationS: b.warmupS });
      await b.upstream.take(); // forget the warm-up's hits
      const run = await runLoad(target, { body, connections, durationS: segmentS });
      runs[mode].push(run);
      (await b.upstream.take()).forEach((h, i) => (hits[mode][i] += h));
      const sorted = [...run.latenciesMs].sort((x, y) => x - y);
      b.progress(
        `${label}, ${what} (${connections} conn), ${MODE_LABELS[mode]}: ` +
          `${(run.requests / run.durationS).toFixed(0)} req/s, p50 ${(sorted[sorted.length >> 1] ?? NaN).toFixed(3)} ms, ` +
          `${run.non2xx} non-2xx, ${run.errors} errors`,
      );
    }
    return Object.fromEntries(MODES.map((m) => [m, runStats(connections, runs[m], hits[m])])) as Record<Mode, RunStats>;
  };

  const latency = await measure("latency", LATENCY_CONNECTIONS);
  const saturation = await measure("saturation", SATURATION_CONNECTIONS);
  const stats = (m: Mode) => ({ latency: latency[m], saturation: saturation[m] });
  return { bodyBytes, endpoints, response, withFilter: stats("with"), floorFilter: stats("floor"), withoutFilter: stats("without") };
}

async function measureEndpointCount(
  endpoints: number,
  bodySizes: number[],
  streamed: boolean,
  settings: Omit<Bench, "upstream" | "targets">,
  envoyBin: string,
  floorWasm: string,
): Promise<OverheadCell[]> {
  const { progress } = settings;
  const cleanups: Array<() => Promise<void>> = [];
  try {
    progress(`${endpoints} endpoints: starting the upstream (${endpoints} ports + snapshot server) and three Envoys`);
    const upstream = await startUpstream(endpoints);
    cleanups.push(() => upstream.stop());

    const withYaml = renderEnvoyConfig({
      gatewayHost: "127.0.0.1",
      gatewayPort: 0,
      adminPort: 0,
      aggregatorHost: "127.0.0.1",
      aggregatorPort: upstream.grpcPort,
      wasmPath: filterWasmPath,
      maxBodyBytes: Math.max(DEFAULT_MAX_BODY_BYTES, ...bodySizes),
      pools: [BENCH_POOL],
    });
    const pools = [{ name: "pods", endpoints: upstream.addresses }];
    const configs: Record<Mode, string> = {
      with: withYaml,
      floor: floorEnvoyConfig(withYaml, pools, "ROUND_ROBIN", floorWasm),
      without: baselineEnvoyConfig(withYaml, pools, "ROUND_ROBIN"),
    };
    const started = await Promise.allSettled(
      MODES.map((mode) => startEnvoy({ configYaml: configs[mode], concurrency: ENVOY_CONCURRENCY, envoyBin })),
    );
    for (const s of started) if (s.status === "fulfilled") cleanups.push(() => s.value.stop());
    for (const s of started) if (s.status === "rejected") throw s.reason;
    const envoys = started.map((s) => (s as PromiseFulfilledResult<EnvoyProcess>).value);

    const target = (envoy: EnvoyProcess): LoadTarget => ({
      url: `http://${envoy.listenerAddresses.llm_gateway}${CHAT_PATH}`,
      envoyPid: envoy.pid,
      upstreamPid: upstream.pid,
    });
    const targets = Object.fromEntries(MODES.map((m, i) => [m, target(envoys[i])])) as Record<Mode, LoadTarget>;
    const probe = chatBody(bodySizes[0]);
    for (const mode of MODES) await waitRoutable(targets[mode].url, probe, `Envoy with ${MODE_LABELS[mode]}`);
    // V8 tiers the filters' Wasm (and Node autocannon's JS) up only once it is hot;
    // until then every mode shows millisecond outliers that have nothing to do with the filter.
    for (const mode of MODES) {
      progress(`${endpoints} endpoints: ${settings.startupWarmupS} s start-up warm-up, ${MODE_LABELS[mode]}`);
      await runLoad(targets[mode], { body: probe, connections: SATURATION_CONNECTIONS, durationS: settings.startupWarmupS });
    }

    const bench = { ...settings, upstream, targets };
    const cells: OverheadCell[] = [];
    for (const bodyBytes of bodySizes) cells.push(await measureCell(bench, bodyBytes, "json"));
    if (streamed) cells.push(await measureCell(bench, bodySizes[0], "sse"));
    return cells;
  } finally {
    for (const stop of cleanups.reverse()) await stop().catch(() => {});
  }
}

export async function runOverhead(opts: OverheadOptions = {}): Promise<OverheadReport> {
  const started = Date.now();
  const progress = opts.onProgress ?? ((line: string) => process.stderr.write(`[overhead] ${line}\n`));
  const durationS = opts.durationS ?? 5;
  if (!(durationS > 0 && durationS <= 3600)) throw new Error(`durationS must be in (0, 3600], got ${durationS}`);
  const bodySizes = checkList("bodySizes", opts.bodySizes ?? [4 * 1024, 64 * 1024], MIN_CHAT_BODY_BYTES, 64 * 1024 * 1024);
  const endpointCounts = checkList("endpointCounts", opts.endpointCounts ?? [8, 64, 1000], 1, MAX_ENDPOINTS);
  const streamedAt = opts.streamedAt ?? (endpointCounts.includes(64) ? 64 : endpointCounts[0]);
  if (streamedAt !== 0 && !endpointCounts.includes(streamedAt)) {
    throw new Error(`streamedAt must be 0 or one of endpointCounts (${endpointCounts.join(", ")}), got ${streamedAt}`);
  }
  const startupWarmupS = Math.min(3, durationS);
  // Long enough for new client connections and, with 1000 endpoints, every upstream pool to open.
  const warmupS = Math.min(0.5, durationS / 4);
  const envoyBin = findEnvoy();
  progress("compiling the floor filter (assembly/floor-filter.ts)");
  const floorWasm = buildFloorFilter();

  const cellCount = endpointCounts.length * bodySizes.length + (streamedAt === 0 ? 0 : 1);
  const measuredS = cellCount * 2 * ORDER.length * (durationS / 2 + warmupS) + endpointCounts.length * MODES.length * startupWarmupS;
  progress(
    `${cellCount} cells (${endpointCounts.join("/")} endpoints × ${bodySizes.join("/")} B, ` +
      `${streamedAt === 0 ? "no SSE cell" : `SSE at ${streamedAt} endpoints`}), 3 Envoys each: about ${Math.ceil(measuredS / 60)} min of load`,
  );
  const cells: OverheadCell[] = [];
  for (const endpoints of endpointCounts) {
    const settings = { durationS, startupWarmupS, warmupS, progress };
    cells.push(...(await measureEndpointCount(endpoints, bodySizes, endpoints === streamedAt, settings, envoyBin, floorWasm)));
  }
  const native = await timeNativeDecisions(bodySizes, endpointCounts, progress);
  const counts = await countPerRequest(bodySizes[0], endpointCounts, streamedAt === 0 ? null : streamedAt, progress);

  const cpuList = cpus();
  return {
    command: COMMAND,
    startedAt: new Date(started).toISOString(),
    elapsedS: (Date.now() - started) / 1000,
    machine: {
      cpus: cpuList.length,
      cpuModel: cpuList[0]?.model.trim() ?? "unknown",
      memoryGiB: totalmem() / 2 ** 30,
      platform: `${platform()} ${release()}`,
      node: process.version,
      envoy: envoyVersion(envoyBin),
    },
    settings: {
      durationS,
      startupWarmupS,
      warmupS,
      order: ORDER,
      latencyConnections: LATENCY_CONNECTIONS,
      saturationConnections: SATURATION_CONNECTIONS,
      envoyConcurrency: ENVOY_CONCURRENCY,
      loadGenerator: `autocannon ${packageVersion("autocannon")}`,
      bodySizes,
      endpointCounts,
      streamedAt,
      streamChunks: STREAM_CHUNKS,
    },
    cells,
    native,
    counts,
  };
}
