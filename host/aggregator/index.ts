// The metrics aggregator: scrapes every pod, keeps the latest normalised state,
// and pushes a Snapshot to Watch streams whenever the routing state changes.
import { lookup } from "node:dns/promises";
import http from "node:http";
import { isIP } from "node:net";
import { ENGINES, formatHostPort, parseEndpoint, type Engine, type GatewayConfig, type PoolConfig } from "../config.js";
import { startMetricsServer, type AggregatorStats, type MetricsServer } from "./metrics.js";
import { normalise, wantedMetrics } from "./normalise.js";
import { startSnapshotServer, type SnapshotServer } from "./push.js";
import { fetchMetrics, parsePrometheusText } from "./scrape.js";
import { CapacityLearner } from "./capacity.js";
import { createReloader, type ReloadResult } from "./reload.js";
import { buildSnapshotBody, isFresh, recordScrape, SnapshotTracker, type EndpointState, type Snapshot } from "./snapshot.js";
import { NO_TELEMETRY, type AggregatorTelemetry } from "./telemetry.js";
import { CLUSTER_LOAD_ASSIGNMENT_TYPE, createDiscoveryServer } from "./xds.js";

export type { Snapshot } from "./snapshot.js";
export type { ReloadResult } from "./reload.js";

export interface AggregatorOptions {
  /** gRPC port; overrides config.aggregator.port; 0 = any free port. */
  port?: number;
  /** Overrides config.aggregator.metricsPort; 0 = any free port; false = off. */
  metricsPort?: number | false;
  log?: (line: string) => void;
  /** Resolves a DNS name to its addresses; default node:dns lookup (tests pass their own). */
  lookup?: (hostname: string) => Promise<Array<{ address: string; family: number }>>;
  telemetry?: AggregatorTelemetry;
  /** How long a pool a reload drops keeps its route and cluster in Envoy (reload.ts); default 5 s. */
  reloadDrainMs?: number;
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

/** Re-resolve DNS names this often while their endpoint is healthy... */
const RESOLVE_EVERY_MS = 30_000;
/** ...and this often while unresolved or stale: a restarted container may have a new IP. */
const RESOLVE_RETRY_MS = 1_000;
const DNS_TIMEOUT_MS = 2_000;

interface Endpoint extends EndpointState {
  pool: string;
  engine: Engine;
  /** As configured. */
  configured: string;
  host: string;
  port: number;
  /** The host is a DNS name, not an IP literal. */
  dnsName: boolean;
  /** Set when `address` is known; what we connect to. */
  ip: string | null;
  scrapeInFlight: boolean;
  resolving: boolean;
  lastResolveMs: number;
  scrapes: number;
  scrapeErrors: number;
  /** Last scrape error, so only changes get logged (not 20 lines/s). */
  lastError: string | null;
}

function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} timed out after ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

function newEndpoint(pool: PoolConfig, configured: string): Endpoint {
  const hp = parseEndpoint(configured);
  if (!hp) throw new Error(`pool ${pool.name}: bad endpoint ${configured}`); // config validation prevents this
  const literal = isIP(hp.host) !== 0;
  return {
    pool: pool.name,
    engine: pool.engine,
    configured,
    host: hp.host,
    port: hp.port,
    dnsName: !literal,
    ip: literal ? hp.host : null,
    address: literal ? formatHostPort(hp.host, hp.port) : null,
    metrics: null,
    lastGoodMs: null,
    capacity: new CapacityLearner(),
    scrapeInFlight: false,
    resolving: false,
    lastResolveMs: 0,
    scrapes: 0,
    scrapeErrors: 0,
    lastError: null,
  };
}

/** Each pool's resolved addresses, as Envoy's pool clusters list them. */
function endpointSets(config: GatewayConfig, endpoints: Endpoint[][]): Map<string, string[]> {
  return new Map(config.pools.map((pool, p) => [pool.name, endpoints[p].flatMap((ep) => (ep.address === null ? [] : [ep.address]))]));
}

/** A reload's new config with its endpoints: those of pods that stay keep their state (metrics, learned capacity). */
interface PreparedConfig {
  config: GatewayConfig;
  endpoints: Endpoint[][];
}

export async function startAggregator(initial: GatewayConfig, opts: AggregatorOptions = {}): Promise<Aggregator> {
  const log = opts.log ?? ((line: string) => console.log(`[aggregator] ${line}`));
  const telemetry = opts.telemetry ?? NO_TELEMETRY;
  // Read once: a reload refuses changes to the aggregator section.
  const { host, scrapeIntervalMs, scrapeTimeoutMs, staleAfterMs } = initial.aggregator;

  // The config in force and its endpoints, endpoints[p] for config.pools[p]; a reload replaces all three.
  let config = initial;
  let endpoints: Endpoint[][] = config.pools.map((pool) => pool.endpoints.map((configured) => newEndpoint(pool, configured)));
  let all = endpoints.flat();
  const lookupHost = opts.lookup ?? ((hostname: string) => lookup(hostname, { all: true }));
  // Envoy's pool clusters, their endpoints and the routes to them (ADS on the gRPC port).
  const discovery = createDiscoveryServer({ log });
  const publishEndpoints = () => discovery.setEndpoints(endpointSets(config, endpoints));

  // One socket per pod, reused across scrapes.
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const stop = new AbortController();
  let closed = false;
  let started = false;

  async function resolve(ep: Endpoint): Promise<void> {
    ep.resolving = true;
    ep.lastResolveMs = Date.now();
    try {
      // Prefer IPv4: Envoy clusters and compose networks are IPv4 first, and
      // "localhost" may list ::1 where the pod only listens on 127.0.0.1.
      const answers = await withTimeout(lookupHost(ep.host), DNS_TIMEOUT_MS, `DNS lookup of ${ep.host}`);
      const pick = answers.find((a) => a.family === 4) ?? answers[0];
      if (closed || !pick) return;
      if (pick.address !== ep.ip) {
        log(`endpoint ${ep.configured} resolved to ${pick.address}${ep.ip ? ` (was ${ep.ip})` : ""}`);
        ep.ip = pick.address;
        ep.address = formatHostPort(pick.address, ep.port);
        publishEndpoints();
      }
    } catch (err) {
      if (!closed) log(`endpoint ${ep.configured}: ${(err as Error).message}`);
    } finally {
      ep.resolving = false;
    }
  }

  const wanted = new Map(ENGINES.map((engine) => [engine, wantedMetrics(engine)]));

  async function scrape(ep: Endpoint): Promise<void> {
    if (ep.ip === null) return;
    ep.scrapeInFlight = true;
    ep.scrapes++;
    try {
      const text = await fetchMetrics({ ip: ep.ip, port: ep.port, hostHeader: ep.configured }, scrapeTimeoutMs, agent, stop.signal);
      const names = wanted.get(ep.engine)!;
      const metrics = normalise(ep.engine, parsePrometheusText(text, (name) => names.has(name)));
      if (closed) return;
      recordScrape(ep, metrics, Date.now());
      if (ep.lastError !== null) log(`endpoint ${ep.configured} scrapes OK again`);
      ep.lastError = null;
    } catch (err) {
      if (closed) return;
      ep.scrapeErrors++;
      const message = (err as Error).message;
      if (message !== ep.lastError) log(`endpoint ${ep.configured} scrape failed: ${message}`);
      ep.lastError = message;
    } finally {
      ep.scrapeInFlight = false;
    }
    refresh();
  }

  // Start-up: resolve names and take one scrape round first, so the first
  // snapshot a filter receives already carries real state.
  // (refresh() does nothing until the gRPC server is up.)
  await Promise.all(all.filter((ep) => ep.dnsName).map(resolve));
  publishEndpoints();
  await Promise.all(all.map(scrape));

  const reloader = createReloader<PreparedConfig>({
    target: {
      current: () => config,
      prepare: async (next) => {
        // A pod keeps its state when its pool, address and engine stay.
        const key = (pool: string, configured: string, engine: Engine) => `${pool}\n${configured}\n${engine}`;
        const kept = new Map(all.map((ep) => [key(ep.pool, ep.configured, ep.engine), ep]));
        const nextEndpoints = next.pools.map((pool) =>
          pool.endpoints.map((configured) => kept.get(key(pool.name, configured, pool.engine)) ?? newEndpoint(pool, configured)));
        const added = nextEndpoints.flat().filter((ep) => !all.includes(ep));
        await Promise.all(added.filter((ep) => ep.dnsName).map(resolve));
        await Promise.all(added.map(scrape));
        discovery.setEndpoints(endpointSets(next, nextEndpoints));
        return { config: next, endpoints: nextEndpoints };
      },
      commit: (prepared) => {
        config = prepared.config;
        endpoints = prepared.endpoints;
        all = endpoints.flat();
        refresh();
      },
      abandon: () => publishEndpoints(),
    },
    discovery,
    log,
    telemetry,
    drainMs: opts.reloadDrainMs,
  });

  const startMs = Date.now();
  const tracker = new SnapshotTracker(buildSnapshotBody(config, endpoints, startMs), startMs, startMs);
  const listeners = new Set<(s: Snapshot) => void>();

  let push: SnapshotServer;
  try {
    push = await startSnapshotServer({
      host,
      port: opts.port ?? config.aggregator.port,
      current: () => tracker.current,
      log,
      heartbeatMs: config.aggregator.heartbeatMs,
      services: [discovery.service],
    });
  } catch (err) {
    closed = true;
    agent.destroy();
    throw err;
  }
  started = true;

  function refresh(): void {
    if (closed || !started) return;
    const now = Date.now();
    const changed = tracker.update(buildSnapshotBody(config, endpoints, now), now);
    if (!changed) return;
    push.publish(changed);
    for (const cb of listeners) {
      // A throwing listener must not stop the scrape loop.
      try {
        cb(changed);
      } catch (err) {
        log(`onSnapshot listener failed: ${(err as Error).message}`);
      }
    }
  }

  const metricsPortOpt = opts.metricsPort ?? (config.aggregator.metricsPort === 0 ? false : config.aggregator.metricsPort);
  let metrics: MetricsServer | null = null;
  if (metricsPortOpt !== false) {
    const stats = (): AggregatorStats => {
      const now = Date.now();
      return {
        endpoints: all.map((ep) => ({
          pool: ep.pool,
          endpoint: ep.configured,
          metrics: ep.metrics,
          learnedCapacity: ep.capacity.value,
          fresh: isFresh(ep, now, staleAfterMs),
          scrapes: ep.scrapes,
          scrapeErrors: ep.scrapeErrors,
        })),
        snapshotVersion: tracker.current.version,
        snapshotsPushed: push.pushed(),
        streams: push.streams(),
        endpointsVersion: discovery.version(CLUSTER_LOAD_ASSIGNMENT_TYPE),
        adsStreams: discovery.streams(),
      };
    };
    try {
      metrics = await startMetricsServer(host, metricsPortOpt, stats);
    } catch (err) {
      closed = true;
      agent.destroy();
      discovery.close();
      await push.close();
      throw err;
    }
  }

  // Each tick starts a scrape for every idle endpoint (never two at once per
  // endpoint, so in-flight work is bounded by the endpoint count), re-resolves
  // DNS names when due, and re-evaluates freshness, which changes with time
  // alone when a pod goes quiet.
  const timer = setInterval(() => {
    const now = Date.now();
    for (const ep of all) {
      if (ep.dnsName && !ep.resolving) {
        const healthy = ep.address !== null && isFresh(ep, now, staleAfterMs);
        if (now - ep.lastResolveMs >= (healthy ? RESOLVE_EVERY_MS : RESOLVE_RETRY_MS)) void resolve(ep);
      }
      if (!ep.scrapeInFlight) void scrape(ep);
    }
    refresh();
  }, scrapeIntervalMs);

  return {
    grpcPort: push.port,
    metricsPort: metrics?.port ?? null,
    current: () => tracker.current,
    onSnapshot(cb) {
      listeners.add(cb);
      return () => listeners.delete(cb);
    },
    config: () => config,
    reload: (next) => reloader.reload(next),
    refuseReload: (reason) => void reloader.refuse(reason),
    async close() {
      if (closed) return;
      closed = true;
      reloader.close();
      clearInterval(timer);
      stop.abort();
      agent.destroy();
      listeners.clear();
      discovery.close();
      await Promise.all([push.close(), metrics?.close()]);
    },
  };
}
