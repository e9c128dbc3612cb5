// The aggregator's own Prometheus /metrics, a prom-client Registry.
// Two sources feed it: events as they happen (AggregatorTelemetry, called
// by the scrape loop, discovery and the push path: scrape latency and
// errors, discovery events, snapshots published, cycle CPU), and, at each
// Prometheus scrape, a pull of AggregatorStats for state (what each pod last
// reported, freshness, connected Envoys), so state never goes stale between
// events. Plus prom-client's default process metrics (CPU, memory, event
// loop lag, GC).
import http from "node:http";
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from "prom-client";
import { formatHostPort } from "../config.js";
import type { DiscoveryEventKind } from "../discovery/source.js";
import type { EndpointMetrics } from "./normalise.js";
import type { AggregatorTelemetry } from "./telemetry.js";

export interface EndpointStats {
  pool: string;
  /** As configured (stable even when its DNS name moves to another IP). */
  endpoint: string;
  metrics: EndpointMetrics | null;
  /** CapacityLearner.value: tokens/s per sequence; 0 = not known yet. */
  learnedCapacity: number;
  fresh: boolean;
}

export interface AggregatorStats {
  endpoints: EndpointStats[];
  snapshotVersion: number;
  /** Snapshot messages written to Watch streams (one per stream per new version). */
  snapshotsPushed: number;
  /** Open Watch streams: one per connected Envoy. */
  streams: number;
  /** Version of the pool endpoint sets served over ADS. */
  endpointsVersion: number;
  adsStreams: number;
  /** Whether this aggregator serves Envoy (always, without leader election). */
  leading: boolean;
  /** Bytes of in-flight reports taken from Envoys, and of fan-outs sent to them (docs/replicas.md). */
  peerInflightBytes: { reported: number; fannedOut: number };
  /** The same for prefix records, and the records the fan-outs' cap dropped. */
  peerPrefix: { reported: number; fannedOut: number; dropped: number };
  peerQueueBytes: { reported: number; fannedOut: number };
  peerEjectionBytes: { reported: number; fannedOut: number };
}

const DISCOVERY_KINDS: DiscoveryEventKind[] = ["added", "removed", "error", "relist"];
// A pod's label is `model_server`: `pod` and `endpoint` are target labels
// Prometheus' Kubernetes service discovery attaches (ours would become
// `exported_pod`), and the filter's stats use the same name.
const PER_ENDPOINT = ["pool", "model_server"] as const;

export class AggregatorMetrics implements AggregatorTelemetry {
  readonly registry = new Registry();
  /** The pull the state gauges read; set by render() at each Prometheus scrape. */
  private latest: AggregatorStats | null = null;
  private readonly scrapeDuration: Histogram<"pool">;
  private readonly lastScrape: Gauge<"pool" | "model_server">;
  private readonly scrapes: Counter<"pool" | "model_server">;
  private readonly scrapeErrors: Counter<"pool" | "model_server" | "kind">;
  private readonly discoveryEvents: Counter<"pool" | "kind">;
  private readonly snapshotBytes: Histogram;
  private readonly snapshotDelay: Histogram;
  private readonly cycleCpu: Histogram;
  private readonly interval: Gauge;
  private readonly reloads: Counter<"outcome">;
  private readonly refusedStreams: Counter<"method">;
  private readonly xdsRejections: Counter<"type">;

  /** `pools`: the configured pools, whose discovery counters start at 0 so every kind is a series from the start. */
  constructor(pools: string[]) {
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry });

    this.scrapeDuration = new Histogram({
      name: "llm_gateway_scrape_duration_seconds",
      help: "Wall time of one scrape of a pod's /metrics, failed ones included.",
      labelNames: ["pool"],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
      registers,
    });
    this.lastScrape = new Gauge({ name: "llm_gateway_endpoint_scrape_seconds", help: "Wall time of the pod's latest scrape.", labelNames: PER_ENDPOINT, registers });
    this.scrapes = new Counter({ name: "llm_gateway_endpoint_scrapes_total", help: "Scrapes of the pod's /metrics.", labelNames: PER_ENDPOINT, registers });
    this.scrapeErrors = new Counter({
      name: "llm_gateway_endpoint_scrape_errors_total",
      help: "Failed scrapes by kind (timeout, refused, http_<status>, parse, ...).",
      labelNames: [...PER_ENDPOINT, "kind"],
      registers,
    });
    this.discoveryEvents = new Counter({
      name: "llm_gateway_discovery_events_total",
      help: "Pods discovered (added), gone (removed), discovery failures (error) and full re-lists (relist), per pool.",
      labelNames: ["pool", "kind"],
      registers,
    });
    for (const pool of pools) for (const kind of DISCOVERY_KINDS) this.discoveryEvents.inc({ pool, kind }, 0);
    this.snapshotBytes = new Histogram({
      name: "llm_gateway_snapshot_bytes",
      help: "Size of each snapshot version published to the connected Envoys (its count: snapshots published).",
      buckets: [256, 1024, 4096, 16_384, 65_536, 262_144, 1_048_576, 4_194_304],
      registers,
    });
    this.snapshotDelay = new Histogram({
      name: "llm_gateway_snapshot_delay_seconds",
      help: "Time from the newest scrape a snapshot carries to its publication.",
      buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
      registers,
    });
    this.cycleCpu = new Histogram({
      name: "llm_gateway_scrape_cycle_cpu_seconds",
      help: "CPU the aggregator's main thread spent per scrape cycle.",
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1],
      registers,
    });
    this.interval = new Gauge({ name: "llm_gateway_scrape_interval_seconds", help: "The scrape interval in force (it may adapt to the fleet size).", registers });
    this.reloads = new Counter({
      name: "llm_gateway_config_reloads_total",
      help: "Config reloads applied, and refused (the aggregator's log names the field and why).",
      labelNames: ["outcome"],
      registers,
    });
    for (const outcome of ["applied", "refused"]) this.reloads.inc({ outcome }, 0);
    this.refusedStreams = new Counter({
      name: "llm_gateway_control_plane_streams_refused_total",
      help: "gRPC streams (Watch, StreamAggregatedResources) refused with RESOURCE_EXHAUSTED because aggregator.maxStreams were open.",
      labelNames: ["method"],
      registers,
    });
    for (const method of ["Watch", "StreamAggregatedResources"]) this.refusedStreams.inc({ method }, 0);
    this.xdsRejections = new Counter({
      name: "llm_gateway_xds_rejections_total",
      help: "ADS responses an Envoy refused (NACK); that Envoy keeps its last good resources, the log names its node id.",
      labelNames: ["type"],
      registers,
    });
    for (const type of ["clusters", "endpoints", "routes"]) this.xdsRejections.inc({ type }, 0);
    this.pulledState(registers);
  }

  scrape(pool: string, pod: string, seconds: number, error: string | null): void {
    this.scrapeDuration.observe({ pool }, seconds);
    this.lastScrape.set({ pool, model_server: pod }, seconds);
    this.scrapes.inc({ pool, model_server: pod });
    if (error !== null) this.scrapeErrors.inc({ pool, model_server: pod, kind: error });
  }

  discovery(pool: string, kind: DiscoveryEventKind): void {
    this.discoveryEvents.inc({ pool, kind });
  }

  snapshotPushed(bytes: number, delayMs: number): void {
    this.snapshotBytes.observe(bytes);
    this.snapshotDelay.observe(Math.max(0, delayMs) / 1000);
  }

  cycle(cpuMs: number, intervalMs: number): void {
    this.cycleCpu.observe(cpuMs / 1000);
    this.interval.set(intervalMs / 1000);
  }

  reload(outcome: "applied" | "refused"): void {
    this.reloads.inc({ outcome });
  }

  streamRefused(method: string): void {
    this.refusedStreams.inc({ method });
  }

  xdsRejected(type: "clusters" | "endpoints" | "routes"): void {
    this.xdsRejections.inc({ type });
  }

  /** The exposition text, with state pulled from `stats` now (two scrapes at once may both read the newer pull). */
  render(stats: AggregatorStats): Promise<string> {
    this.latest = stats;
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  /** Gauges (and two counters kept elsewhere) read from the pull at each Prometheus scrape. */
  private pulledState(registers: Registry[]): void {
    const self = this;
    const perEndpoint = (name: string, help: string, value: (e: EndpointStats) => number) =>
      new Gauge({
        name,
        help,
        labelNames: PER_ENDPOINT,
        registers,
        collect() {
          this.reset();
          for (const e of self.latest?.endpoints ?? []) this.set({ pool: e.pool, model_server: e.endpoint }, value(e));
        },
      });
    const single = (name: string, help: string, value: (s: AggregatorStats) => number) =>
      new Gauge({
        name,
        help,
        registers,
        collect() {
          if (self.latest) this.set(value(self.latest));
        },
      });

    perEndpoint("llm_gateway_endpoint_waiting", "Requests queued on the model server (last good scrape).", (e) => e.metrics?.waiting ?? 0);
    perEndpoint("llm_gateway_endpoint_running", "Requests in the model server's running batch (last good scrape).", (e) => e.metrics?.running ?? 0);
    perEndpoint("llm_gateway_endpoint_kv_cache_usage", "KV-cache utilisation 0..1 (last good scrape; 0 for TGI).", (e) => e.metrics?.kvCacheUsage ?? 0);
    perEndpoint("llm_gateway_endpoint_max_lora", "LoRA adapter slots reported by the model server.", (e) => e.metrics?.maxLora ?? 0);
    perEndpoint(
      "llm_gateway_endpoint_learned_capacity",
      "Service rate learned from the inter-token latency histogram, tokens/s per sequence (0 = not known yet); the snapshot carries it unless the pool configures capacities.",
      (e) => e.learnedCapacity,
    );
    perEndpoint("llm_gateway_endpoint_fresh", "1 when the endpoint's metrics are recent enough to route on.", (e) => (e.fresh ? 1 : 0));
    new Gauge({
      name: "llm_gateway_endpoint_lora_adapter",
      help: "LoRA adapters resident (state=running) or queued for loading (state=waiting) per endpoint.",
      labelNames: [...PER_ENDPOINT, "adapter", "state"],
      registers,
      collect() {
        this.reset();
        for (const e of self.latest?.endpoints ?? []) {
          for (const adapter of e.metrics?.runningAdapters ?? []) this.set({ pool: e.pool, model_server: e.endpoint, adapter, state: "running" }, 1);
          for (const adapter of e.metrics?.waitingAdapters ?? []) this.set({ pool: e.pool, model_server: e.endpoint, adapter, state: "waiting" }, 1);
        }
      },
    });
    single("llm_gateway_snapshot_version", "Version of the current snapshot.", (s) => s.snapshotVersion);
    single("llm_gateway_connected_streams", "Open SnapshotService/Watch streams: one per connected Envoy.", (s) => s.streams);
    single("llm_gateway_endpoints_version", "Version of the pools' endpoint sets served to Envoy over ADS.", (s) => s.endpointsVersion);
    single("llm_gateway_ads_streams", "Open ADS streams (one per Envoy).", (s) => s.adsStreams);
    single("llm_gateway_aggregator_leading", "1 while this aggregator serves Envoy; 0 while it stands by (aggregator.leaderElection).", (s) => (s.leading ? 1 : 0));
    // Bytes each kind of sharing between Envoy replicas moved: reports taken (direction=report), fan-outs sent (direction=fanout).
    const shareBytes = (name: string, what: string, pick: (s: AggregatorStats) => { reported: number; fannedOut: number }) =>
      new Counter({
        name,
        help: `Bytes of ${what} shared between Envoy replicas: reports taken (direction=report), fan-outs sent (direction=fanout).`,
        labelNames: ["direction"],
        registers,
        collect() {
          if (!self.latest) return;
          this.reset();
          this.inc({ direction: "report" }, pick(self.latest).reported);
          this.inc({ direction: "fanout" }, pick(self.latest).fannedOut);
        },
      });
    shareBytes("llm_gateway_peer_inflight_bytes_total", "requests in flight", (s) => s.peerInflightBytes);
    shareBytes("llm_gateway_peer_prefix_bytes_total", "prefix placements", (s) => s.peerPrefix);
    shareBytes("llm_gateway_peer_queue_bytes_total", "queue boards", (s) => s.peerQueueBytes);
    shareBytes("llm_gateway_peer_ejection_bytes_total", "passive-health ejections", (s) => s.peerEjectionBytes);
    new Counter({
      name: "llm_gateway_peer_prefix_records_dropped_total",
      help: "Prefix records left out of fan-outs by their size cap, once per Envoy not sent one (placements are hints: the oldest go first).",
      registers,
      collect() {
        if (!self.latest) return;
        this.reset();
        this.inc(self.latest.peerPrefix.dropped);
      },
    });
    new Counter({
      name: "llm_gateway_snapshots_pushed_total",
      help: "Snapshot messages written to Watch streams (one per stream per new version).",
      registers,
      collect() {
        if (!self.latest) return;
        this.reset();
        this.inc(self.latest.snapshotsPushed);
      },
    });
  }
}

export interface MetricsServer {
  readonly port: number;
  close(): Promise<void>;
}

export async function startMetricsServer(host: string, port: number, metrics: AggregatorMetrics, stats: () => AggregatorStats): Promise<MetricsServer> {
  const server = http.createServer((req, res) => {
    const path = (req.url ?? "").split("?")[0];
    // Liveness/readiness probe: this server starts only once discovery has
    // answered and the gRPC server is up, and answers without rendering the
    // per-pod series (which grow with the fleet).
    if (req.method === "GET" && path === "/healthz") {
      res.writeHead(200, { "content-type": "text/plain" }).end("ok\n");
      return;
    }
    if (req.method !== "GET" || path !== "/metrics") {
      res.writeHead(404, { "content-type": "text/plain" }).end("not found; try GET /metrics or /healthz\n");
      return;
    }
    metrics.render(stats()).then(
      (text) => res.writeHead(200, { "content-type": metrics.contentType }).end(text),
      (err: Error) => res.writeHead(500, { "content-type": "text/plain" }).end(`metrics failed: ${err.message}\n`),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const address = server.address();
  const bound = typeof address === "object" && address ? address.port : port;
  return {
    port: bound,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** For log lines: where the metrics server listens. */
export const metricsUrl = (host: string, port: number) => `http://${formatHostPort(host, port)}/metrics`;
