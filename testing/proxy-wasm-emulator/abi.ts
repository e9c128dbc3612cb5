// Proxy-Wasm ABI 0.2.1 constants, as the spec (proxy-wasm/spec,
// abi-versions/v0.2.1) numbers them.

export const Status = {
  Ok: 0,
  NotFound: 1,
  BadArgument: 2,
  SerializationFailure: 3,
  ParseFailure: 4,
  InvalidMemoryAccess: 6,
  Empty: 7,
  CasMismatch: 8,
  InternalFailure: 10,
  Unimplemented: 12,
} as const;

/** proxy_log_level_t, by number. */
export const LOG_LEVEL_NAMES = ["trace", "debug", "info", "warn", "error", "critical"] as const;
export type LogLevelName = (typeof LOG_LEVEL_NAMES)[number];

export const BufferType = {
  HttpRequestBody: 0,
  HttpResponseBody: 1,
  DownstreamData: 2,
  UpstreamData: 3,
  HttpCallResponseBody: 4,
  GrpcCallMessage: 5,
  VmConfiguration: 6,
  PluginConfiguration: 7,
  ForeignFunctionArguments: 8,
} as const;
export const MAX_BUFFER_TYPE = BufferType.ForeignFunctionArguments;

export const MapType = {
  HttpRequestHeaders: 0,
  HttpRequestTrailers: 1,
  HttpResponseHeaders: 2,
  HttpResponseTrailers: 3,
  GrpcCallInitialMetadata: 4,
  GrpcCallTrailingMetadata: 5,
  HttpCallResponseHeaders: 6,
  HttpCallResponseTrailers: 7,
} as const;
export const MAX_MAP_TYPE = MapType.HttpCallResponseTrailers;

export type MetricKind = "counter" | "gauge" | "histogram";
/** proxy_metric_type_t, by number. */
export const METRIC_KINDS: readonly MetricKind[] = ["counter", "gauge", "histogram"];

/** What proxy_on_request_headers / _trailers return (Envoy's FilterHeadersStatus numbering). */
export const HeaderAction = { Continue: 0, StopIteration: 1, ContinueAndEndStream: 2, StopAllIterationAndBuffer: 3, StopAllIterationAndWatermark: 4 } as const;

/** What proxy_on_request_body returns (Envoy's FilterDataStatus numbering). */
export const DataAction = { Continue: 0, StopIterationAndBuffer: 1, StopIterationAndWatermark: 2, StopIterationNoBuffer: 3 } as const;
