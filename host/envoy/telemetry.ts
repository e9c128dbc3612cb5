// The listener's JSON access log and OpenTelemetry tracing: Envoy's own
// machinery, reading what the filter already leaves on the request (the
// headers it sets for routing) and on its stream info, so they cost the
// filter no host call.
import type { AccessLogConfig, TracingConfig } from "../config.js";
import { CONTRACT } from "../contract.js";

export const OTLP_CLUSTER = "llm_gateway_otlp";
const H = CONTRACT.headers;
const req = (header: string) => `%REQ(${header})%`;

/**
 * One JSON line per request. `decision_us` is Envoy's time from the
 * request's last byte received to its first byte sent to the pod: the
 * filter's decision, any hold in its queue, and a new connection to the pod
 * if one had to be opened.
 */
export const ACCESS_LOG_FIELDS: Readonly<Record<string, string>> = {
  start_time: "%START_TIME%",
  request_id: req("x-request-id"),
  method: req(":method"),
  path: req(":path"),
  protocol: "%PROTOCOL%",
  status: "%RESPONSE_CODE%",
  response_flags: "%RESPONSE_FLAGS%",
  details: "%RESPONSE_CODE_DETAILS%",
  model: req(H.modelName),
  base_model: req(H.baseModel),
  pool: req(H.pool),
  class: req(H.priority),
  chosen: req(H.destinationEndpoint),
  upstream_host: "%UPSTREAM_HOST%",
  attempts: "%UPSTREAM_REQUEST_ATTEMPT_COUNT%",
  decision_us: "%COMMON_DURATION(DS_RX_END:US_TX_BEG:us)%",
  first_byte_ms: "%RESPONSE_DURATION%",
  duration_ms: "%DURATION%",
  bytes_received: "%BYTES_RECEIVED%",
  bytes_sent: "%BYTES_SENT%",
  user_agent: req("user-agent"),
  trace_id: "%TRACE_ID%",
  // {"prompt_tokens":N,"completion_tokens":M} from the answer's usage, left by the filter.
  tokens: "%FILTER_STATE(wasm.llm_gateway_usage:PLAIN)%",
};

/** A file, or Envoy's stdout logger (opening /dev/stdout fails when stdout is a socket). */
export function accessLog(cfg: AccessLogConfig): Array<Record<string, unknown>> {
  const log_format = { json_format: ACCESS_LOG_FIELDS, omit_empty_values: true };
  if (cfg.path === undefined) {
    return [{
      name: "envoy.access_loggers.stdout",
      typed_config: { "@type": "type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog", log_format },
    }];
  }
  return [{
    name: "envoy.access_loggers.file",
    typed_config: { "@type": "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog", path: cfg.path, log_format },
  }];
}

/** Span attributes: the decision, from the headers the filter sets (read when the span ends). */
export const SPAN_TAGS: ReadonlyArray<readonly [string, string]> = [
  ["llm_gateway.pool", H.pool],
  ["llm_gateway.model", H.modelName],
  ["llm_gateway.base_model", H.baseModel],
  ["llm_gateway.pod", H.destinationEndpoint],
  ["llm_gateway.class", H.priority],
  ["llm_gateway.decision", H.decision],
];

/** The HTTP connection manager's `tracing` block: Envoy's OpenTelemetry tracer, OTLP over gRPC. */
export function tracing(cfg: TracingConfig): Record<string, unknown> {
  return {
    random_sampling: { value: cfg.samplingPercent },
    provider: {
      name: "envoy.tracers.opentelemetry",
      typed_config: {
        "@type": "type.googleapis.com/envoy.config.trace.v3.OpenTelemetryConfig",
        // A busy collector may take a while; a batch that times out is dropped.
        grpc_service: { envoy_grpc: { cluster_name: OTLP_CLUSTER }, timeout: "5s" },
        service_name: cfg.serviceName,
      },
    },
    custom_tags: SPAN_TAGS.map(([tag, name]) => ({ tag, request_header: { name } })),
  };
}

/** The collector: gRPC, so HTTP/2; STRICT_DNS takes an IP literal or a service name. */
export function otlpCluster(cfg: TracingConfig): Record<string, unknown> {
  return {
    name: OTLP_CLUSTER,
    type: "STRICT_DNS",
    dns_lookup_family: "V4_PREFERRED",
    connect_timeout: "1s",
    typed_extension_protocol_options: {
      "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
        "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
        explicit_http_config: { http2_protocol_options: {} },
      },
    },
    load_assignment: {
      cluster_name: OTLP_CLUSTER,
      endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: cfg.host, port_value: cfg.port } } } }] }],
    },
  };
}
