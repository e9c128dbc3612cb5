// The metrics aggregator, wired from its steps: discovery (each pool's
// targets, host/discovery/) -> the scrape loop (cycle.ts) -> fetch, parse
// and normalise per pod (pod.ts) -> at each cycle's end Envoy's endpoint
// sets (xds.ts) and one snapshot (snapshot-builder.ts), pushed over gRPC (push.ts).
// A reload (reload.ts) starts the sources of new or changed pools, and puts
// the new config in force once Envoy has their clusters.
import { formatHostPort, type GatewayConfig, type PoolConfig } from "../config.js";
import { discoverySources } from "../discovery/index.js";
import type { Lookup } from "../discovery/dns.js";
import type { DiscoverySink } from "../discovery/source.js";
import { ScrapeLoop } from "./cycle.js";
import { AggregatorMetrics, startMetricsServer, type AggregatorStats, type MetricsServer } from "./metrics.js";
import { PoolState } from "./pool.js";
import { SnapshotBuilder } from "./snapshot-builder.js";
import { startLeadership } from "./leader-choice.js";
import { soleLeadership, type Leadership } from "./leadership.js";
import { serverCredentials } from "./link-security.js";
import { startSnapshotServer, type SnapshotServer } from "./push.js";
import { createReloader, type Reloader, type ReloadResult } from "./reload.js";
import type { Snapshot } from "./snapshot.js";
import { standbyGate } from "./standby.js";
import { NO_TELEMETRY, type AggregatorTelemetry } from "./telemetry.js";
import { CLUSTER_LOAD_ASSIGNMENT_TYPE, createDiscoveryServer, type DiscoveryServer } from "./xds.js";

export type { Snapshot } from "./snapshot.js";
export type { ReloadResult } from "./reload.js";

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
  /** How long a pool a reload drops keeps its route and cluster in Envoy (reload.ts); default 5 s. */
  reloadDrainMs?: number;
  /** With aggregator.leaderElection: the gRPC address the other aggregators reach this one at; default aggregator.host and the bound port. */
  advertise?: string;
  /** With a Lease: this aggregator's name in it; default hostname_pid. */
  identity?: string;
}

export interface Aggregator {
  readonly grpcPort: number;
  /** null when the metrics endpoint is off. */
  readonly metricsPort: number | null;
  current(): Snapshot;
  /** Called with every new snapshot version; returns an unsubscribe function. */
  onSnapshot(cb: (snapshot: Snapshot) => void): () => void;
  /** The config in force. */
  config(): GatewayConfig;
  /**
   * Applies a new config without a restart (pools, endpoints, weights,
   * adapters, profiles, models and their routes), or refuses it, naming the
   * fields only a restart can change, and keeps the config in force.
   * Logged and counted (telemetry.reload) either way.
   */
  reload(next: GatewayConfig): Promise<ReloadResult>;
  /** Logs and counts a reload that never had a config: an unreadable or invalid file. */
  refuseReload(reason: string): void;
  close(): Promise<void>;
}

/**
 * Hands a pool's source's reports to that pool's state (not to another state
 * of the same name a reload is preparing), and counts its events.
 */
function discoverySink(state: PoolState, telemetry: AggregatorTelemetry, log: (line: string) => void): DiscoverySink {
  return {
    targets(pool, targets) {
      if (pool === state.name) state.setTargets(targets, Date.now());
    },
    event(pool, kind, detail) {
      telemetry.discovery(pool, kind);
      if (kind === "error" || kind === "relist") log(`pool ${pool} discovery ${kind}${detail ? `: ${detail}` : ""}`);
    },
  };
}

/** Pushes each pool's pod addresses, and which of them fail their scrapes, to Envoy (ADS): all pools, or those that changed. */
function publishEndpoints(discovery: DiscoveryServer, pools: readonly PoolState[]): void {
  if (pools.length === 0) return;
  discovery.setEndpoints(new Map(pools.map((p) => [p.name, p.addresses()])), new Map(pools.map((p) => [p.name, p.failing()])));
}

/**
 * Whether a pool's pods come from the same place in both configs: then its
 * state (source, pods, their metrics and learned capacities) carries over a
 * reload. These fields of a pool leave discovery and scraping alone; any
 * other (endpoints, engine, capacities, a selector) starts the pool afresh.
 */
function sameDiscovery(a: PoolConfig, b: PoolConfig): boolean {
  const discoveryPart = ({ baseModel: _m, adapters: _a, profile: _p, weights: _w, weightOverrides: _o, batchSlots: _b, ...rest }: PoolConfig) =>
    JSON.stringify(rest);
  return discoveryPart(a) === discoveryPart(b);
}

/** A reload's config with each of its pools' state: kept, or new with its source started. */
interface PreparedConfig {
  config: GatewayConfig;
  states: Map<string, PoolState>;
  started: PoolState[];
}

function aggregatorStats(pools: readonly PoolState[], staleAfterMs: number, snapshot: Snapshot, push: SnapshotServer, discovery: DiscoveryServer, leading: boolean): AggregatorStats {
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
    endpointsVersion: discovery.version(CLUSTER_LOAD_ASSIGNMENT_TYPE),
    adsStreams: discovery.streams(),
    leading,
    peerInflightBytes: push.sharedBytes(),
    peerPrefix: push.sharedPrefixes(),
    peerQueueBytes: push.sharedQueues(),
    peerEjectionBytes: push.sharedEjections(),
  };
}

export async function startAggregator(initial: GatewayConfig, opts: AggregatorOptions = {}): Promise<Aggregator> {
  const log = opts.log ?? ((line: string) => console.log(`[aggregator] ${line}`));
  // The config in force; a reload replaces it (and refuses changes to the aggregator section, read once here).
  let config = initial;
  const { host, scrapeIntervalMs, scrapeTimeoutMs, staleAfterMs } = config.aggregator;
  const metricsPortOpt = opts.metricsPort ?? (config.aggregator.metricsPort === 0 ? false : config.aggregator.metricsPort);
  const ownMetrics = metricsPortOpt === false ? null : new AggregatorMetrics(config.pools.map((p) => p.name));
  const telemetry = opts.telemetry ?? ownMetrics ?? NO_TELEMETRY;

  // Each pool's state, made from its source; a reload replaces the map.
  const sources = discoverySources(config, { lookup: opts.lookup, log });
  let poolStates = new Map(config.pools.map((pool) => [pool.name, new PoolState(pool, sources.get(pool.name)!)]));
  const pools = () => config.pools.map((pool) => poolStates.get(pool.name)!);
  // Envoy's pool clusters, their endpoints and the routes to them (ADS on the gRPC port).
  const discovery = createDiscoveryServer({ log, onRejected: (type) => telemetry.xdsRejected(type) });
  const listeners = new Set<(s: Snapshot) => void>();
  let push: SnapshotServer | null = null;
  let metrics: MetricsServer | null = null;
  // Until the election has answered, a standby: nobody is served a view by an aggregator that may not lead.
  let leadership: Leadership = { ...soleLeadership(""), leading: () => !config.aggregator.leaderElection, leader: () => null };
  let closed = false;

  /** `configChanged`: a reload put a new config in force, so the snapshot is rebuilt whatever the pods did. */
  function endCycle(configChanged = false): void {
    if (closed || !push) return;
    const moved = pools().filter((p) => p.membersChanged);
    for (const p of moved) p.membersChanged = false;
    // Brings every pod's entry (and so its freshness) up to date.
    const built = builder.next(pools(), moved.length > 0 || configChanged, Date.now());
    // Before the snapshot, so Envoy has a new pod before the filter names it.
    publishEndpoints(discovery, pools().filter((p) => p.failingChanged() || moved.includes(p)));
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

  /** Starts the sources of `next`'s new or changed pools and serves their endpoints; `next` is not in force yet. */
  async function prepare(next: GatewayConfig): Promise<PreparedConfig> {
    const changed = next.pools.filter((pool) => {
      const kept = poolStates.get(pool.name);
      return !(kept && sameDiscovery(kept.config, pool));
    });
    const newSources = discoverySources({ ...next, pools: changed }, { lookup: opts.lookup, log });
    const states = new Map<string, PoolState>();
    const started: PoolState[] = [];
    for (const pool of next.pools) {
      const source = newSources.get(pool.name);
      const state = source ? new PoolState(pool, source) : poolStates.get(pool.name)!;
      if (source) started.push(state);
      states.set(pool.name, state);
    }
    try {
      await Promise.all(started.map((state) => state.source.start(discoverySink(state, telemetry, log))));
    } catch (err) {
      for (const state of started) state.close();
      throw err;
    }
    for (const state of started) state.membersChanged = false;
    // Envoy warms the new clusters with these before any snapshot names them.
    publishEndpoints(discovery, [...states.values()]);
    return { config: next, states, started };
  }

  /** Puts a prepared config in force: pools that went (or were started afresh) stop, and the snapshot follows at once. */
  function commit({ config: next, states }: PreparedConfig): void {
    for (const [name, state] of poolStates) if (states.get(name) !== state) state.close();
    const now = Date.now();
    for (const pool of next.pools) states.get(pool.name)!.reconfigure(pool, now);
    config = next;
    poolStates = states;
    builder.reconfigure(next);
    publishEndpoints(discovery, pools());
    endCycle(true);
  }

  let reloader: Reloader | null = null;
  async function shutdown(): Promise<void> {
    closed = true;
    reloader?.close();
    await leadership.close();
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
    await Promise.all(pools().map((pool) => pool.source.start(discoverySink(pool, telemetry, log))));
    for (const pool of pools()) pool.membersChanged = false;
    publishEndpoints(discovery, pools());
    await loop.firstRound();
    // Serves the config's clusters and routes from here on.
    reloader = createReloader<PreparedConfig>({
      target: {
        current: () => config,
        prepare,
        commit,
        abandon: ({ started }) => {
          for (const state of started) state.close();
          publishEndpoints(discovery, pools());
        },
      },
      discovery,
      log,
      telemetry,
      drainMs: opts.reloadDrainMs,
    });
    const startMs = Date.now();
    builder = new SnapshotBuilder(config, pools(), startMs, startMs);
    push = await startSnapshotServer({
      host,
      port: opts.port ?? config.aggregator.port,
      current: () => builder.current,
      log,
      heartbeatMs: config.aggregator.heartbeatMs,
      shareIntervalMs: config.aggregator.shareIntervalMs,
      services: [discovery.service],
      credentials: await serverCredentials(config.aggregator),
      maxStreams: config.aggregator.maxStreams,
      onStreamRefused: (method) => telemetry.streamRefused(method),
      standby: standbyGate(() => leadership, log),
    });
    leadership = await startLeadership(config.aggregator.leaderElection, {
      self: opts.advertise ?? formatHostPort(host, push.port),
      identity: opts.identity,
      log,
    });
    if (ownMetrics !== null && metricsPortOpt !== false) {
      const server = push;
      metrics = await startMetricsServer(host, metricsPortOpt, ownMetrics, () => aggregatorStats(pools(), staleAfterMs, builder.current, server, discovery, leadership.leading()));
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
    config: () => config,
    reload: (next) => reloader!.reload(next),
    refuseReload: (reason) => void reloader!.refuse(reason),
    async close() {
      if (closed) return;
      await shutdown();
    },
  };
}
