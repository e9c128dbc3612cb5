// What renderEnvoyConfig takes, and the header names the rendered routes match
// (the filter sets them; the contract names them for both languages).
import type { AccessLogConfig, JwtConfig, PassiveHealthConfig, StaleViewConfig, TracingConfig, TrafficConfig } from "../config.js";
import type { EdgeLimitsConfig, ListenerTlsConfig, PodTlsConfig } from "../config/edge.js";
import { CONTRACT } from "../contract.js";
import type { ControlPlaneFailoverParams } from "./control-plane-failover.js";
import type { ControlPlaneTlsParams } from "./control-plane-tls.js";

/** Request headers the filter reads; early_header_mutation removes every client-sent x-gateway-* header before any filter runs. */
export const POOL_HEADER = CONTRACT.headers.pool;
/** Set by the filter to the model name the client asked for (before any split rewrites the body). */
export const MODEL_NAME_HEADER = CONTRACT.headers.modelName;
/** Set by the filter to "1" on a streamed request (`"stream": true`): it takes a pool's or model's stream route. */
export const STREAM_HEADER = CONTRACT.headers.stream;
/** Set by jwt_authn from a verified token's claim, for the traffic gates that name a claim. */
export const CLAIM_HEADERS = {
  critical: CONTRACT.headers.claimCritical,
  debug: CONTRACT.headers.claimDebug,
  tenant: CONTRACT.headers.claimTenant,
} as const;

/** Route settings for one model name, repeated on each pool its requests can land in. */
export interface ModelRouteParams {
  model: string;
  /** Pool names: the model's own, or its split targets'. */
  pools: string[];
  timeoutMs?: number;
  rateLimit?: { requestsPerS: number; burst: number };
  /** Its own profile's streamIdleMs; absent, each pool's own. */
  streamIdleMs?: number;
}

export interface EnvoyConfigParams {
  /** Listener address, e.g. "127.0.0.1" or "0.0.0.0". */
  gatewayHost: string;
  /** Listener port; 0 lets Envoy pick (read it back with EnvoyProcess.listenerAddresses). */
  gatewayPort: number;
  /** Admin port on 127.0.0.1; 0 lets Envoy pick (startEnvoy reads it back). */
  adminPort: number;
  /** A listener on gatewayHost:statsPort serving only admin's /stats/prometheus (for Prometheus in a cluster). */
  statsPort?: number;
  /** Metrics aggregator gRPC endpoint: an IP or a DNS name. */
  aggregatorHost: string;
  aggregatorPort: number;
  /** Absolute path of build/filter.wasm. */
  wasmPath: string;
  /** Largest request body the filter accepts; at most the contract's limit, which the filter enforces too. */
  maxBodyBytes: number;
  /** The filter's view-age bound and policy; the filter's defaults when absent. */
  staleView?: StaleViewConfig;
  /** The filter's passive-health rules; the filter's defaults when absent. */
  passiveHealth?: PassiveHealthConfig;
  /** Pool names, in config order: one route and one EDS cluster each. */
  pools: string[];
  /** Each pool's profile's streamIdleMs, for its stream route; the latency profile's for a pool not listed. */
  streamIdleMs?: Readonly<Record<string, number>>;
  /** Require a JWT on every request (Envoy's jwt_authn filter, ahead of ours). */
  jwt?: JwtConfig;
  /** A JSON access log line per request. */
  accessLog?: AccessLogConfig;
  /** OpenTelemetry spans to a collector. */
  tracing?: TracingConfig;
  /** false leaves our Wasm HTTP filter out (tests: the routes alone must never reach a wrong host). */
  wasmFilter?: boolean;
  /** Routes matching x-gateway-model-name, each placed before its pool's route. */
  modelRoutes?: ModelRouteParams[];
  /** Who may claim Critical and get debug output; the filter's defaults (none, off) when absent. */
  traffic?: TrafficConfig;
  /** Mutual TLS to the aggregator (its SDS files: controlPlaneSdsFiles); plaintext when absent. */
  controlPlaneTls?: ControlPlaneTlsParams;
  /** Several aggregators, Envoy following the leader; one aggregator when absent. */
  controlPlaneFailover?: ControlPlaneFailoverParams;
  /** The link's report interval for sharing with the other replicas (aggregator.shareIntervalMs); absent: the link's default. */
  shareIntervalMs?: number;
  /** HTTPS at the listener; its SDS files (envoySdsFiles) must be written to sdsDir before Envoy starts. */
  tls?: ListenerTlsConfig;
  /** Absolute folder of the SDS files, needed with tls: beside the bootstrap. */
  sdsDir?: string;
  /** Timeouts, stream cap and overload manager; the config file's defaults when absent. */
  limits?: EdgeLimitsConfig;
  /** TLS to the pods, by pool name. */
  poolTls?: Readonly<Record<string, PodTlsConfig>>;
}
