// The aggregator's own Prometheus /metrics: what it last saw per endpoint,
// how scraping goes, how many snapshots it pushed, and what it serves Envoy over ADS.
import http from "node:http";
import { formatHostPort } from "../config.js";
import type { EndpointMetrics } from "./normalise.js";

export interface EndpointStats {
  pool: string;
  /** As configured (stable even when its DNS name moves to another IP). */
  endpoint: string;
  metrics: EndpointMetrics | null;
  /** CapacityLearner.value: tokens/s per sequence; 0 = not known yet. */
  learnedCapacity: number;
  fresh: boolean;
  scrapes: number;
  scrapeErrors: number;
}

export interface AggregatorStats {
  endpoints: EndpointStats[];
  snapshotVersion: number;
  snapshotsPushed: number;
  streams: number;
  /** Version of the pool endpoint sets served over ADS. */
  endpointsVersion: number;
  adsStreams: number;
}

const escapeLabel = (v: string) => v.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");
const labelText = (labels: Record<string, string>) =>
  "{" + Object.entries(labels).map(([k, v]) => `${k}="${escapeLabel(v)}"`).join(",") + "}";

export function renderMetrics(stats: AggregatorStats): string {
  const out: string[] = [];
  const family = (name: string, type: "gauge" | "counter", help: string, rows: Array<[Record<string, string>, number]>) => {
    out.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
    for (const [labels, value] of rows) out.push(`${name}${Object.keys(labels).length ? labelText(labels) : ""} ${value}`);
  };
  const perEndpoint = (value: (e: EndpointStats) => number) =>
    stats.endpoints.map((e): [Record<string, string>, number] => [{ pool: e.pool, endpoint: e.endpoint }, value(e)]);

  family("llm_gateway_endpoint_waiting", "gauge", "Requests queued on the model server (last good scrape).", perEndpoint((e) => e.metrics?.waiting ?? 0));
  family("llm_gateway_endpoint_running", "gauge", "Requests in the model server's running batch (last good scrape).", perEndpoint((e) => e.metrics?.running ?? 0));
  family("llm_gateway_endpoint_kv_cache_usage", "gauge", "KV-cache utilisation 0..1 (last good scrape; 0 for TGI).", perEndpoint((e) => e.metrics?.kvCacheUsage ?? 0));
  family("llm_gateway_endpoint_max_lora", "gauge", "LoRA adapter slots reported by the model server.", perEndpoint((e) => e.metrics?.maxLora ?? 0));
  family(
    "llm_gateway_endpoint_learned_capacity",
    "gauge",
    "Service rate learned from the inter-token latency histogram, tokens/s per sequence (0 = not known yet); the snapshot carries it unless the pool configures capacities.",
    perEndpoint((e) => e.learnedCapacity),
  );
  family("llm_gateway_endpoint_fresh", "gauge", "1 when the endpoint's metrics are recent enough to route on.", perEndpoint((e) => (e.fresh ? 1 : 0)));
  family(
    "llm_gateway_endpoint_lora_adapter",
    "gauge",
    "LoRA adapters resident (state=running) or queued for loading (state=waiting) per endpoint.",
    stats.endpoints.flatMap((e) => [
      ...(e.metrics?.runningAdapters ?? []).map((adapter): [Record<string, string>, number] => [{ pool: e.pool, endpoint: e.endpoint, adapter, state: "running" }, 1]),
      ...(e.metrics?.waitingAdapters ?? []).map((adapter): [Record<string, string>, number] => [{ pool: e.pool, endpoint: e.endpoint, adapter, state: "waiting" }, 1]),
    ]),
  );
  family("llm_gateway_endpoint_scrapes_total", "counter", "Scrapes of the endpoint's /metrics.", perEndpoint((e) => e.scrapes));
  family("llm_gateway_endpoint_scrape_errors_total", "counter", "Failed scrapes (network, HTTP status, timeout, missing metrics).", perEndpoint((e) => e.scrapeErrors));
  family("llm_gateway_snapshot_version", "gauge", "Version of the current snapshot.", [[{}, stats.snapshotVersion]]);
  family("llm_gateway_snapshots_pushed_total", "counter", "Snapshot messages written to Watch streams.", [[{}, stats.snapshotsPushed]]);
  family("llm_gateway_connected_streams", "gauge", "Open SnapshotService/Watch streams.", [[{}, stats.streams]]);
  family("llm_gateway_endpoints_version", "gauge", "Version of the pools' endpoint sets served to Envoy over ADS.", [[{}, stats.endpointsVersion]]);
  family("llm_gateway_ads_streams", "gauge", "Open ADS streams (one per Envoy).", [[{}, stats.adsStreams]]);
  return out.join("\n") + "\n";
}

export interface MetricsServer {
  readonly port: number;
  close(): Promise<void>;
}

export async function startMetricsServer(host: string, port: number, stats: () => AggregatorStats): Promise<MetricsServer> {
  const server = http.createServer((req, res) => {
    if (req.method !== "GET" || (req.url ?? "").split("?")[0] !== "/metrics") {
      res.writeHead(404, { "content-type": "text/plain" }).end("not found; try GET /metrics\n");
      return;
    }
    res.writeHead(200, { "content-type": "text/plain; version=0.0.4; charset=utf-8" }).end(renderMetrics(stats()));
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
