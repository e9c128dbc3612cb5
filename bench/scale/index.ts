// `npm run bench -- --scale`: the aggregator against N fake vLLM pods with
// realistic /metrics pages, at several fleet sizes. Per size: fake pods in a
// worker thread (pods.ts), the real aggregator in a child process
// (aggregator-child.ts) so its CPU is its own, a Watch client here
// (watch.ts); after a warm-up (the scrape interval adapts to the fleet), one
// measured window.
import { availableParallelism, cpus } from "node:os";
import { latencySummary } from "../percentiles.js";
import { startAggregatorChild, type AggregatorSample } from "./aggregator-child.js";
import { startFakePods } from "./pods.js";
import { watchSnapshots } from "./watch.js";

export const DEFAULT_SIZES = [100, 500, 1000];

export interface ScaleOptions {
  sizes?: number[];
  /** Seconds before the window, for the aggregator to settle (its interval adapts within a few cycles). */
  warmupS?: number;
  /** Seconds measured per size. */
  measureS?: number;
  onProgress?: (line: string) => void;
}

export interface ScaleRow {
  pods: number;
  /** Bytes of one pod's /metrics page. */
  pageBytes: number;
  /** The scrape interval in force at the window's end (the configured one unless it adapted); null when the aggregator reports none. */
  intervalMs: number | null;
  /** Scrape cycles in the window: from the aggregator's telemetry, else pages served per pod. */
  cycles: number;
  cyclesPerS: number;
  /** The aggregator process's CPU per cycle, and as a share of one core. */
  cpuMsPerCycle: number;
  coreShare: number;
  /** Pages served per cycle: the pods, when each is scraped once per cycle. */
  scrapesPerCycle: number;
  /** Snapshots that reached the Watch client, per cycle. */
  pushesPerCycle: number;
  /** From a pod serving a page to the snapshot carrying it reaching the Watch client, ms. */
  delayMs: { p50: number; p99: number; max: number } | null;
  /** The aggregator's own view (telemetry snapshotPushed): how long the oldest change a push carried had waited, ms; null when it reports none. */
  pushDelayMs: { p50: number; p99: number; max: number } | null;
  snapshotBytes: number;
  /** Endpoints in the last snapshot. */
  endpoints: number;
  scrapeErrors: number;
  /** The aggregator process's resident memory at the window's end. */
  rssBytes: number;
}

export interface ScaleReport {
  configuredIntervalMs: number;
  warmupS: number;
  measureS: number;
  machine: { cpus: number; model: string; node: string };
  rows: ScaleRow[];
}

/** The configured scrape interval: the aggregator's default. */
const INTERVAL_MS = 50;
const MAX_FAILURE_LINES = 3;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function configYaml(ports: readonly number[]): string {
  return [
    `aggregator: { host: 127.0.0.1, port: 0, metricsPort: 0, scrapeIntervalMs: ${INTERVAL_MS} }`,
    "pools:",
    "  - name: llama",
    "    baseModel: meta-llama/Llama-3.1-8B-Instruct",
    "    engine: vllm",
    "    adapters: [sql-lora, chat-lora]",
    "    endpoints:",
    ...ports.map((p) => `      - 127.0.0.1:${p}`),
    "",
  ].join("\n");
}

async function measureSize(pods: number, opts: Required<Omit<ScaleOptions, "sizes">>): Promise<ScaleRow> {
  const say = (line: string) => opts.onProgress(`${pods} pods: ${line}`);
  const fleet = await startFakePods(pods);
  try {
    say(`${pods} fake pods up (${(fleet.pageBytes / 1024).toFixed(0)} KB pages); starting the aggregator`);
    // Its interval changes, and the first few failures (a pod per line otherwise).
    let failures = 0;
    const aggregator = await startAggregatorChild(configYaml(fleet.ports), (line) => {
      if (line.startsWith("scrape interval")) say(`aggregator: ${line}`);
      else if (line.includes("failed") && ++failures <= MAX_FAILURE_LINES) say(`aggregator: ${line}`);
    });
    try {
      const watch = watchSnapshots(aggregator.grpcPort, fleet);
      try {
        say(`warming up ${opts.warmupS} s`);
        await sleep(opts.warmupS * 1000);
        say(`measuring ${opts.measureS} s`);
        const start: AggregatorSample = await aggregator.sample();
        const servedBefore = fleet.served();
        const startMs = performance.now();
        watch.reset();
        await sleep(opts.measureS * 1000);
        const end = await aggregator.sample();
        const seconds = (performance.now() - startMs) / 1000;
        const served = fleet.served() - servedBefore;
        const counts = watch.counts;
        const telemetryCycles = end.totals.cycles - start.totals.cycles;
        const cycles = telemetryCycles > 0 ? telemetryCycles : served / pods;
        const cpuMs = end.cpuMs - start.cpuMs;
        const delay = latencySummary(counts.delaysMs);
        const pushDelay = latencySummary(end.pushDelaysMs);
        const row: ScaleRow = {
          pods,
          pageBytes: fleet.pageBytes,
          intervalMs: end.totals.intervalMs || null,
          cycles,
          cyclesPerS: cycles / seconds,
          cpuMsPerCycle: cpuMs / cycles,
          coreShare: cpuMs / (seconds * 1000),
          scrapesPerCycle: served / cycles,
          pushesPerCycle: counts.pushes / cycles,
          delayMs: delay && { p50: delay.p50, p99: delay.p99, max: delay.max },
          pushDelayMs: pushDelay && { p50: pushDelay.p50, p99: pushDelay.p99, max: pushDelay.max },
          snapshotBytes: counts.lastBytes,
          endpoints: counts.lastEndpoints,
          scrapeErrors: end.totals.scrapeErrors - start.totals.scrapeErrors,
          rssBytes: end.rssBytes,
        };
        if (failures > MAX_FAILURE_LINES) say(`aggregator: ${failures - MAX_FAILURE_LINES} more failure lines not shown`);
        say(`${row.cpuMsPerCycle.toFixed(1)} ms CPU per cycle, ${row.cyclesPerS.toFixed(1)} cycles/s, ${(row.coreShare * 100).toFixed(0)}% of a core`);
        return row;
      } finally {
        watch.close();
      }
    } finally {
      await aggregator.stop();
    }
  } finally {
    await fleet.stop();
  }
}

export async function runScale(options: ScaleOptions = {}): Promise<ScaleReport> {
  const opts = {
    warmupS: options.warmupS ?? 4,
    measureS: options.measureS ?? 10,
    onProgress: options.onProgress ?? (() => {}),
  };
  const rows: ScaleRow[] = [];
  for (const pods of options.sizes ?? DEFAULT_SIZES) rows.push(await measureSize(pods, opts));
  return {
    configuredIntervalMs: INTERVAL_MS,
    warmupS: opts.warmupS,
    measureS: opts.measureS,
    machine: { cpus: availableParallelism(), model: cpus()[0]?.model ?? "unknown", node: process.version },
    rows,
  };
}
