// Envoy stats the filter defines; Prometheus shows them without the
// `wasmcustom.` prefix, dots mapped to underscores.
import { defineMetric, incrementMetric, MetricType, recordMetric } from "../abi/hostcalls";

export class FilterMetrics {
  /** Routed by model only, Envoy's balancer choosing the pod: the view was too old. */
  routedBlind: u32 = defineMetric(MetricType.Counter, "llm_gateway.requests_routed_blind");
  /** Failures recorded against pods (5xx, or the request had to leave its first pod). */
  endpointFailures: u32 = defineMetric(MetricType.Counter, "llm_gateway.endpoint_failures");
  rejected4xx: u32 = defineMetric(MetricType.Counter, "llm_gateway.requests_rejected_4xx");
  unavailable: u32 = defineMetric(MetricType.Counter, "llm_gateway.requests_unavailable");
  spoofedHeaders: u32 = defineMetric(MetricType.Counter, "llm_gateway.client_control_headers_removed");
  snapshotUpdates: u32 = defineMetric(MetricType.Counter, "llm_gateway.snapshot_updates");
  snapshotEndpoints: u32 = defineMetric(MetricType.Gauge, "llm_gateway.snapshot_endpoints");
  /** The aggregator's version of the newest snapshot a worker loaded. */
  snapshotVersion: u32 = defineMetric(MetricType.Gauge, "llm_gateway.snapshot_version");

  rejected(status: i32): void {
    incrementMetric(status >= 500 ? this.unavailable : this.rejected4xx, 1);
  }

  count(id: u32): void {
    incrementMetric(id, 1);
  }

  add(id: u32, n: i64): void {
    incrementMetric(id, n);
  }

  set(id: u32, value: u64): void {
    recordMetric(id, value);
  }
}
