// The metrics aggregator: scrapes every pod, keeps the latest normalised state,
// and pushes a Snapshot to Watch streams whenever the routing state changes.
import { lookup } from "node:dns/promises";
import http from "node:http";
import { isIP } from "node:net";
import { formatHostPort, parseEndpoint, type Engine, type GatewayConfig } from "../config.js";
import { AggregatorMetrics, startMetricsServer, type AggregatorStats, type MetricsServer } from "./metrics.js";
import { NO_TELEMETRY, type AggregatorTelemetry } from "./telemetry.js";
import { encodeSnapshot } from "../proto.js";
import { normalise, wantedMetrics } from "./normalise.js";
import { startSnapshotServer, type SnapshotServer } from "./push.js";
import { fetchMetrics, parsePrometheusText } from "./scrape.js";
import { CapacityLearner } from "./capacity.js";
import { buildSnapshotBody, isFresh, recordScrape, SnapshotTracker, type EndpointState, type Snapshot } from "./snapshot.js";
import { createEndpointDiscovery } from "./xds.js";

export type { Snapshot } from "./snapshot.js";

export interface AggregatorOptions {
  /** gRPC port; overrides config.aggregator.port; 0 = any free port. */
  port?: number;
  /** Overrides config.aggregator.metricsPort; 0 = any free port; false = off. */
  metricsPort?: number | false;
  log?: (line: string) => void;
  /** Resolves a DNS name to its addresses; default node:dns lookup (tests pass their own). */
  lookup?: (hostname: string) => Promise<Array<{ address: string; family: number }>>;
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

/** A failed scrape's kind, for the scrape-errors metric. */
function scrapeErrorKind(err: Error & { code?: string }): string {
  if (err.code === "ECONNREFUSED") return "refused";
  if (err.code !== undefined || /socket hang up/.test(err.message)) return "network";
  if (/^timed out/.test(err.message)) return "timeout";
  const http = /^HTTP (\d{3})/.exec(err.message);
  if (http) return `http_${http[1]}`;
  return /larger than/.test(err.message) ? "too_large" : "parse";
}

export async function startAggregator(config: GatewayConfig, opts: AggregatorOptions = {}): Promise<Aggregator> {
  const log = opts.log ?? ((line: string) => console.log(`[aggregator] ${line}`));
  const { host, scrapeIntervalMs, scrapeTimeoutMs, staleAfterMs } = config.aggregator;
  const metricsPortOpt = opts.metricsPort ?? (config.aggregator.metricsPort === 0 ? false : config.aggregator.metricsPort);
  // The aggregator's own /metrics; the scrape loop, DNS discovery and the push report into it.
  const ownMetrics = metricsPortOpt === false ? null : new AggregatorMetrics(config.pools.map((p) => p.name));
  const telemetry: AggregatorTelemetry = ownMetrics ?? NO_TELEMETRY;

  const endpoints: Endpoint[][] = config.pools.map((pool) =>
    pool.endpoints.map((configured) => {
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
        lastError: null,
      };
    }),
  );
  const all = endpoints.flat();
  for (const ep of all) if (ep.address !== null) telemetry.discovery(ep.pool, "added");
  const lookupHost = opts.lookup ?? ((hostname: string) => lookup(hostname, { all: true }));
  // Envoy's pool clusters list exactly these addresses (ADS on the gRPC port).
  const discovery = createEndpointDiscovery({ log });
  const publishEndpoints = () =>
    discovery.update(new Map(config.pools.map((pool, p) => [
      pool.name,
      endpoints[p].flatMap((ep) => (ep.address === null ? [] : [ep.address])),
    ])));

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
        if (ep.ip !== null) telemetry.discovery(ep.pool, "removed");
        telemetry.discovery(ep.pool, "added");
        ep.ip = pick.address;
        ep.address = formatHostPort(pick.address, ep.port);
        publishEndpoints();
      }
    } catch (err) {
      if (closed) return;
      log(`endpoint ${ep.configured}: ${(err as Error).message}`);
      telemetry.discovery(ep.pool, "error");
    } finally {
      ep.resolving = false;
    }
  }

  const wanted = new Map(config.pools.map((p) => [p.engine, wantedMetrics(p.engine)]));

  async function scrape(ep: Endpoint): Promise<void> {
    if (ep.ip === null) return;
    ep.scrapeInFlight = true;
    const startedMs = performance.now();
    try {
      const text = await fetchMetrics({ ip: ep.ip, port: ep.port, hostHeader: ep.configured }, scrapeTimeoutMs, agent, stop.signal);
      const names = wanted.get(ep.engine)!;
      const metrics = normalise(ep.engine, parsePrometheusText(text, (name) => names.has(name)));
      if (closed) return;
      recordScrape(ep, metrics, Date.now());
      telemetry.scrape(ep.pool, ep.configured, (performance.now() - startedMs) / 1000, null);
      if (ep.lastError !== null) log(`endpoint ${ep.configured} scrapes OK again`);
      ep.lastError = null;
    } catch (err) {
      if (closed) return;
      telemetry.scrape(ep.pool, ep.configured, (performance.now() - startedMs) / 1000, scrapeErrorKind(err as Error));
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
    const newestScrapeMs = Math.max(0, ...all.map((ep) => ep.lastGoodMs ?? 0));
    telemetry.snapshotPushed(encodeSnapshot(changed).length, newestScrapeMs > 0 ? now - newestScrapeMs : 0);
    for (const cb of listeners) {
      // A throwing listener must not stop the scrape loop.
      try {
        cb(changed);
      } catch (err) {
        log(`onSnapshot listener failed: ${(err as Error).message}`);
      }
    }
  }

  let metrics: MetricsServer | null = null;
  if (ownMetrics !== null && metricsPortOpt !== false) {
    const stats = (): AggregatorStats => {
      const now = Date.now();
      return {
        endpoints: all.map((ep) => ({
          pool: ep.pool,
          endpoint: ep.configured,
          metrics: ep.metrics,
          learnedCapacity: ep.capacity.value,
          fresh: isFresh(ep, now, staleAfterMs),
        })),
        snapshotVersion: tracker.current.version,
        snapshotsPushed: push.pushed(),
        streams: push.streams(),
        endpointsVersion: discovery.version(),
        adsStreams: discovery.streams(),
      };
    };
    try {
      metrics = await startMetricsServer(host, metricsPortOpt, ownMetrics, stats);
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
  let cpuMark = process.cpuUsage();
  const timer = setInterval(() => {
    const cpu = process.cpuUsage(cpuMark);
    cpuMark = process.cpuUsage();
    telemetry.cycle((cpu.user + cpu.system) / 1000, scrapeIntervalMs);
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
    async close() {
      if (closed) return;
      closed = true;
      clearInterval(timer);
      stop.abort();
      agent.destroy();
      listeners.clear();
      discovery.close();
      await Promise.all([push.close(), metrics?.close()]);
    },
  };
}
