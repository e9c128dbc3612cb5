// The metrics aggregator, wired from its steps: discovery (each pool's
// targets, host/discovery/) -> the scrape loop (cycle.ts) -> fetch, parse
// and normalise per pod (pod.ts) -> at each cycle's end Envoy's endpoint
// sets (xds.ts) and one snapshot (snapshot-builder.ts), pushed over gRPC (push.ts).
import type { GatewayConfig } from "../config.js";
import { discoverySources } from "../discovery/index.js";
import type { Lookup } from "../discovery/dns.js";
import type { DiscoverySink } from "../discovery/source.js";
import { ScrapeLoop } from "./cycle.js";
import { AggregatorMetrics, startMetricsServer, type AggregatorStats, type MetricsServer } from "./metrics.js";
import { PoolState } from "./pool.js";
import { SnapshotBuilder } from "./snapshot-builder.js";
import { startSnapshotServer, type SnapshotServer } from "./push.js";
import type { Snapshot } from "./snapshot.js";
import { NO_TELEMETRY, type AggregatorTelemetry } from "./telemetry.js";
import { createEndpointDiscovery, type EndpointDiscovery } from "./xds.js";

export type { Snapshot } from "./snapshot.js";

export interface AggregatorOptions {
  /** gRPC port; overrides config.aggregator.port; 0 = any free port. */
  port?: number;
  /** Overrides config.aggregator.metricsPort; 0 = any free port; false = off. */
  metricsPort?: number | false;
  log?: (line: string) => void;
  /** Resolves a DNS name to its addresses; default node:dns lookup (tests pass their own). */
  lookup?: Lookup;
  /** What the aggregator reports about its own work; default its /metrics registry (none when that is off). */
  telemetry?: AggregatorTelemetry;
}

export interface Aggregator {
  readonly grpcPort: number;
  /** null when the metrics endpoint is off. */
  readonly metricsPort: number | null;
  current(): Snapshot;
  /** Called with every new snapshot version; returns an unsubscribe function. */
  onSnapshot(cb: (snapshot: Snapshot) => void): () => void;
  close(): Promise<void>;
}

/** Routes each source's reports to its pool's state, and counts its events. */
function discoverySink(pools: ReadonlyMap<string, PoolState>, telemetry: AggregatorTelemetry, log: (line: string) => void): DiscoverySink {
  return {
    targets(pool, targets) {
      pools.get(pool)?.setTargets(targets, Date.now());
    },
    event(pool, kind, detail) {
      telemetry.discovery(pool, kind);
      if (kind === "error" || kind === "relist") log(`pool ${pool} discovery ${kind}${detail ? `: ${detail}` : ""}`);
    },
  };
}

/** Pushes each pool's pod addresses to Envoy (ADS): all of them, or only the pools whose pods changed. */
function publishEndpoints(discovery: EndpointDiscovery, pools: readonly PoolState[]): void {
  if (pools.length > 0) discovery.update(new Map(pools.map((p) => [p.name, p.addresses()])));
}

function aggregatorStats(pools: readonly PoolState[], staleAfterMs: number, snapshot: Snapshot, push: SnapshotServer, discovery: EndpointDiscovery): AggregatorStats {
  const now = Date.now();
  return {
    endpoints: pools.flatMap((pool) =>
      Array.from(pool.pods, (pod) => ({
        pool: pool.name,
        endpoint: pod.target.name,
        metrics: pod.metrics,
        learnedCapacity: pod.capacity.value,
        fresh: pod.isFresh(now, staleAfterMs),
      })),
    ),
    snapshotVersion: snapshot.version,
    snapshotsPushed: push.pushed(),
    streams: push.streams(),
    endpointsVersion: discovery.version(),
    adsStreams: discovery.streams(),
  };
}

export async function startAggregator(config: GatewayConfig, opts: AggregatorOptions = {}): Promise<Aggregator> {
  const log = opts.log ?? ((line: string) => console.log(`[aggregator] ${line}`));
  const { host, scrapeIntervalMs, scrapeTimeoutMs, staleAfterMs } = config.aggregator;
  const metricsPortOpt = opts.metricsPort ?? (config.aggregator.metricsPort === 0 ? false : config.aggregator.metricsPort);
  const ownMetrics = metricsPortOpt === false ? null : new AggregatorMetrics(config.pools.map((p) => p.name));
  const telemetry = opts.telemetry ?? ownMetrics ?? NO_TELEMETRY;

  // A reload replaces entries of this map (a pool's state, made from its source).
  const sources = discoverySources(config, { lookup: opts.lookup, log });
  const poolStates = new Map(config.pools.map((pool) => [pool.name, new PoolState(pool, sources.get(pool.name)!)]));
  const pools = () => config.pools.map((pool) => poolStates.get(pool.name)!);
  const discovery = createEndpointDiscovery({ log });
  const listeners = new Set<(s: Snapshot) => void>();
  let push: SnapshotServer | null = null;
  let metrics: MetricsServer | null = null;
  let closed = false;

  function endCycle(): void {
    if (closed || !push) return;
    const moved = pools().filter((p) => p.membersChanged);
    for (const p of moved) p.membersChanged = false;
    publishEndpoints(discovery, moved);
    const built = builder.next(pools(), moved.length > 0, Date.now());
    if (!built) return;
    const bytes = push.publish(built.snapshot);
    telemetry.snapshotPushed(bytes, Date.now() - built.oldestChangeMs);
    for (const cb of listeners) {
      // A throwing listener must not stop the scrape loop.
      try {
        cb(built.snapshot);
      } catch (err) {
        log(`onSnapshot listener failed: ${(err as Error).message}`);
      }
    }
  }

  const loop = new ScrapeLoop({ intervalMs: scrapeIntervalMs, timeoutMs: scrapeTimeoutMs, staleAfterMs, pools, endCycle, telemetry, log });

  async function shutdown(): Promise<void> {
    closed = true;
    loop.stop();
    for (const pool of poolStates.values()) pool.close();
    listeners.clear();
    discovery.close();
    await Promise.all([push?.close(), metrics?.close()]);
  }

  let builder: SnapshotBuilder;
  try {
    // Start-up: every source's first answer, then one scrape of every pod,
    // so the first snapshot a filter receives already carries real state.
    const sink = discoverySink(poolStates, telemetry, log);
    await Promise.all([...poolStates.values()].map((pool) => pool.source.start(sink)));
    for (const pool of pools()) pool.membersChanged = false;
    publishEndpoints(discovery, pools());
    await loop.firstRound();
    const startMs = Date.now();
    builder = new SnapshotBuilder(config, pools(), startMs, startMs);
    push = await startSnapshotServer({
      host,
      port: opts.port ?? config.aggregator.port,
      current: () => builder.current,
      log,
      heartbeatMs: config.aggregator.heartbeatMs,
      services: [discovery.service],
    });
    if (ownMetrics !== null && metricsPortOpt !== false) {
      const server = push;
      metrics = await startMetricsServer(host, metricsPortOpt, ownMetrics, () => aggregatorStats(pools(), staleAfterMs, builder.current, server, discovery));
    }
  } catch (err) {
    await shutdown();
    throw err;
  }
  loop.start();

  const grpcPort = push.port;
  return {
    grpcPort,
    metricsPort: metrics?.port ?? null,
    current: () => builder.current,
    onSnapshot(cb) {
      listeners.add(cb);
      return () => listeners.delete(cb);
    },
    async close() {
      if (closed) return;
      await shutdown();
    },
  };
}
