// What the aggregator reports about its own work as it happens (the gauges
// of per-pod state are read at scrape time from AggregatorStats instead).
// The scrape loop, discovery and the push server call these; metrics.ts
// turns them into prom-client series. NO_TELEMETRY is for tools and tests
// that run an aggregator without a metrics endpoint.
import type { DiscoveryEventKind } from "../discovery/source.js";

export interface AggregatorTelemetry {
  /** One scrape of one pod finished: its wall time and, when it failed, why (a short kind: "timeout", "refused", "http_503", "parse"). */
  scrape(pool: string, pod: string, seconds: number, error: string | null): void;
  /** A discovery source reported a change or a problem. */
  discovery(pool: string, kind: DiscoveryEventKind): void;
  /** A snapshot went out to the connected Envoys: its encoded size, and how long the oldest change it carries waited (from its scrape landing). */
  snapshotPushed(bytes: number, delayMs: number): void;
  /** One scrape cycle: CPU it took on the main thread, and the interval in force (it adapts to the fleet size). */
  cycle(cpuMs: number, intervalMs: number): void;
  /** A config reload was applied, or refused (the log line says why, naming the field). */
  reload(outcome: "applied" | "refused"): void;
  /** A stream was refused because aggregator.maxStreams were open (its gRPC method name). */
  streamRefused(method: string): void;
  /** An Envoy refused (NACKed) an ADS response of this type. */
  xdsRejected(type: "clusters" | "endpoints" | "routes"): void;
}

export const NO_TELEMETRY: AggregatorTelemetry = {
  scrape() {},
  discovery() {},
  snapshotPushed() {},
  cycle() {},
  reload() {},
  streamRefused() {},
  xdsRejected() {},
};
