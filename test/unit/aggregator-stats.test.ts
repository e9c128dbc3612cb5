// The aggregator's prom-client registry: telemetry events become series,
// state is pulled at each render, and the text is what Prometheus parses.
import { describe, expect, it } from "vitest";
import { AggregatorMetrics, type AggregatorStats } from "../../host/aggregator/metrics.js";

const STATS: AggregatorStats = {
  endpoints: [
    { pool: "llama", endpoint: "10.0.0.1:8000", learnedCapacity: 42, fresh: true,
      metrics: { waiting: 3, running: 7, kvCacheUsage: 0.41, maxLora: 4, runningAdapters: ["sql"], waitingAdapters: ["chat"] } as never },
    { pool: "llama", endpoint: "10.0.0.2:8000", learnedCapacity: 0, fresh: false, metrics: null },
  ],
  snapshotVersion: 17,
  snapshotsPushed: 5,
  streams: 2,
  endpointsVersion: 3,
  adsStreams: 2,
  leading: true,
  peerInflightBytes: { reported: 1200, fannedOut: 3400 },
  peerQueueBytes: { reported: 148, fannedOut: 440 },
  peerEjectionBytes: { reported: 24, fannedOut: 72 },
  peerPrefix: { reported: 900, fannedOut: 8100, dropped: 7 },
};

/** The value of the sample `series` (name and labels exactly as printed). */
function sample(text: string, series: string): number | undefined {
  const line = text.split("\n").find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

describe("aggregator metrics", () => {
  it("turns scrape, discovery, push and cycle events into series", async () => {
    const m = new AggregatorMetrics(["llama", "qwen"]);
    m.scrape("llama", "10.0.0.1:8000", 0.004, null);
    m.scrape("llama", "10.0.0.2:8000", 1.5, "timeout");
    m.scrape("llama", "10.0.0.2:8000", 0.002, "http_503");
    m.discovery("llama", "added");
    m.discovery("llama", "added");
    m.snapshotPushed(3000, 12);
    m.cycle(2.5, 50);
    const text = await m.render(STATS);
    expect(sample(text, 'llm_gateway_endpoint_scrapes_total{pool="llama",model_server="10.0.0.2:8000"}')).toBe(2);
    expect(sample(text, 'llm_gateway_endpoint_scrape_errors_total{pool="llama",model_server="10.0.0.2:8000",kind="timeout"}')).toBe(1);
    expect(sample(text, 'llm_gateway_endpoint_scrape_errors_total{pool="llama",model_server="10.0.0.2:8000",kind="http_503"}')).toBe(1);
    expect(sample(text, 'llm_gateway_endpoint_scrape_seconds{pool="llama",model_server="10.0.0.2:8000"}')).toBe(0.002);
    expect(sample(text, 'llm_gateway_scrape_duration_seconds_count{pool="llama"}')).toBe(3);
    expect(sample(text, 'llm_gateway_scrape_duration_seconds_bucket{le="0.005",pool="llama"}')).toBe(2);
    expect(sample(text, 'llm_gateway_discovery_events_total{pool="llama",kind="added"}')).toBe(2);
    // Every configured pool has every kind from the start, at 0.
    expect(sample(text, 'llm_gateway_discovery_events_total{pool="qwen",kind="relist"}')).toBe(0);
    expect(sample(text, "llm_gateway_snapshot_bytes_sum")).toBe(3000);
    expect(sample(text, "llm_gateway_snapshot_delay_seconds_sum")).toBe(0.012);
    expect(sample(text, "llm_gateway_scrape_cycle_cpu_seconds_sum")).toBe(0.0025);
    expect(sample(text, "llm_gateway_scrape_interval_seconds")).toBe(0.05);
  });

  it("pulls per-pod state and the push server's figures at each render", async () => {
    const m = new AggregatorMetrics(["llama"]);
    const text = await m.render(STATS);
    const pod = 'pool="llama",model_server="10.0.0.1:8000"';
    expect(sample(text, `llm_gateway_endpoint_waiting{${pod}}`)).toBe(3);
    expect(sample(text, `llm_gateway_endpoint_running{${pod}}`)).toBe(7);
    expect(sample(text, `llm_gateway_endpoint_kv_cache_usage{${pod}}`)).toBe(0.41);
    expect(sample(text, `llm_gateway_endpoint_max_lora{${pod}}`)).toBe(4);
    expect(sample(text, `llm_gateway_endpoint_learned_capacity{${pod}}`)).toBe(42);
    expect(sample(text, `llm_gateway_endpoint_lora_adapter{${pod},adapter="sql",state="running"}`)).toBe(1);
    expect(sample(text, `llm_gateway_endpoint_lora_adapter{${pod},adapter="chat",state="waiting"}`)).toBe(1);
    expect(sample(text, 'llm_gateway_endpoint_fresh{pool="llama",model_server="10.0.0.2:8000"}')).toBe(0);
    expect(sample(text, "llm_gateway_snapshot_version")).toBe(17);
    expect(sample(text, "llm_gateway_snapshots_pushed_total")).toBe(5);
    expect(sample(text, "llm_gateway_connected_streams")).toBe(2);
    expect(sample(text, "llm_gateway_ads_streams")).toBe(2);
    expect(sample(text, 'llm_gateway_peer_inflight_bytes_total{direction="fanout"}')).toBe(3400);
    expect(sample(text, 'llm_gateway_peer_queue_bytes_total{direction="fanout"}')).toBe(440);
    expect(sample(text, 'llm_gateway_peer_ejection_bytes_total{direction="report"}')).toBe(24);
    expect(sample(text, 'llm_gateway_peer_prefix_bytes_total{direction="fanout"}')).toBe(8100);
    expect(sample(text, "llm_gateway_peer_prefix_records_dropped_total")).toBe(7);
    expect(sample(text, "llm_gateway_aggregator_leading")).toBe(1);
    expect(sample(text, "llm_gateway_endpoints_version")).toBe(3);
    expect(text).toMatch(/^process_cpu_user_seconds_total \d/m);
    expect(text).toMatch(/^nodejs_heap_size_used_bytes \d/m);

    // A pod that left is gone at the next render, and counters follow the pull.
    const later = await m.render({ ...STATS, endpoints: STATS.endpoints.slice(1), snapshotsPushed: 9 });
    expect(sample(later, `llm_gateway_endpoint_waiting{${pod}}`)).toBeUndefined();
    expect(sample(later, "llm_gateway_snapshots_pushed_total")).toBe(9);
  });
});
