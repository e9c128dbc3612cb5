// The gateway config's shape once parsed and defaulted: what the rest of the
// product reads (host/config.ts parses a file into it).
import type { AggregatorTlsConfig, ControlPlaneClientTlsConfig } from "./control-plane.js";
import type { EdgeLimitsConfig, ListenerTlsConfig, PodTlsConfig } from "./edge.js";
import type { JwtConfig } from "./jwt.js";
import type { LeaderElectionConfig } from "./leader-election.js";
import type { AccessLogConfig, TracingConfig } from "./telemetry.js";
import type { SCORERS } from "../scorers.generated.js";

export const ENGINES = ["vllm", "sglang", "tgi", "llamacpp", "trtllm"] as const;
export type Engine = (typeof ENGINES)[number];

export interface GatewayListenerConfig {
  host: string;
  port: number;
  adminPort: number;
  /** When set, a listener on host:statsPort answers GET /stats/prometheus (from admin) and nothing else. */
  statsPort?: number;
  maxBodyBytes: number;
  staleView: StaleViewConfig;
  passiveHealth: PassiveHealthConfig;
  /** When set, every request needs a valid JWT (Envoy's jwt_authn). */
  jwt?: JwtConfig;
  /** Envoy's client certificate for the aggregator link (mutual TLS); required with aggregator.tls. */
  controlPlaneTls?: ControlPlaneClientTlsConfig;
  /** HTTPS at the listener; absent, plain HTTP, allowed only on loopback or with `plaintext`. */
  tls?: ListenerTlsConfig;
  /** Plain HTTP on a non-loopback host, on purpose (e.g. behind a TLS-terminating load balancer). */
  plaintext: boolean;
  limits: EdgeLimitsConfig;
  /** When set, Envoy writes one JSON line per request. */
  accessLog?: AccessLogConfig;
  /** When set, Envoy sends OpenTelemetry spans to a collector. */
  tracing?: TracingConfig;
}

/** What the filter does when it has not heard from the aggregator for a while. */
export interface StaleViewConfig {
  /** Silence from the aggregator after which per-pod metrics are not trusted. */
  maxAgeMs: number;
  /** failOpen: Envoy's least-request among the pool's known pods; reject: 503 + Retry-After. */
  policy: "failOpen" | "reject";
  retryAfterS: number;
}

/** The filter's passive health: consecutive failures eject a pod for a while. */
export interface PassiveHealthConfig {
  ejectAfterFailures: number;
  ejectMs: number;
  /** A pod that answers 429 or 503 itself is passed over this long, no failure counted. */
  saturatedBackoffMs: number;
}

export interface AggregatorConfig {
  host: string;
  /** gRPC port of SnapshotService. */
  port: number;
  /** The aggregator's own Prometheus /metrics; 0 = off. */
  metricsPort: number;
  scrapeIntervalMs: number;
  scrapeTimeoutMs: number;
  /** An endpoint is not fresh once its last good scrape is older than this. */
  staleAfterMs: number;
  /** Longest silence on a snapshot stream; Envoy judges the aggregator alive by it. */
  heartbeatMs: number;
  /** Mutual TLS on the gRPC port; without it, the host must be loopback or plaintext true. */
  tls?: AggregatorTlsConfig;
  /** Serves the gRPC port without TLS on a non-loopback host, deliberately. */
  plaintext: boolean;
  /** Snapshot and ADS streams open at once; more are refused with RESOURCE_EXHAUSTED. */
  maxStreams: number;
  /** Several aggregators, one serving Envoy at a time; absent, this one always does. */
  leaderElection?: LeaderElectionConfig;
  /**
   * How often Envoy replicas share their requests in flight through the
   * aggregator: each Envoy's report interval and the aggregator's fan-out
   * round (docs/replicas.md); 0: each Envoy routes on its own counts alone.
   */
  shareIntervalMs: number;
}

/** A weight per scorer, by the scorer's name (host/scorers.generated.ts, from the scorers' own folders). */
export type ScorerWeights = Record<ScorerName, number>;
export type ScorerName = (typeof SCORERS)[number]["name"];

export interface PoolConfig {
  name: string;
  baseModel: string;
  engine: Engine;
  adapters: string[];
  /** The profile of the pool's models unless a model names another (`models[].profile`). */
  profile: string;
  /** The pool's default profile's weights with the pool's own `weights` fields over them. */
  weights: ScorerWeights;
  /** The fields the pool's `weights` gave: they override every profile's weights for this pool's models. */
  weightOverrides: Partial<ScorerWeights>;
  /**
   * `host:port` or `[v6]:port`; host may be a DNS name, resolved by the
   * aggregator. Empty when the pool's pods are discovered through `kubernetes`.
   */
  endpoints: string[];
  /** Present when the pool's pods are the Ready pods a label selector matches (then `endpoints` is empty). */
  kubernetes?: KubernetesPoolConfig;
  /** Present when the pool's pods are an InferencePool's (then `endpoints` is empty). */
  inferencePool?: InferencePoolRefConfig;
  /** Sequences each pod's engine runs in one batch (vLLM max_num_seqs); the file's, else the engine's default. */
  batchSlots: number;
  /**
   * Relative capacities, one per endpoint, present when the file gives any
   * endpoint of the pool one (the others get 1); absent, the aggregator
   * learns each pod's rate from its metrics. Never mixed: learned rates and
   * configured ones are in different units.
   */
  capacities?: number[];
  /** The pods serve HTTPS: Envoy's requests and the aggregator's scrapes verify them with this. */
  tls?: PodTlsConfig;
}

/** A pool discovered like an InferencePool: the Ready pods with an IP that a label selector matches in one namespace. */
export interface KubernetesPoolConfig {
  namespace: string;
  /** The API's selector string (a `matchLabels` mapping becomes `key=value,...`). */
  selector: string;
  /** The port the pods' model servers listen on (an InferencePool's target port). */
  port: number;
  /**
   * A kubeconfig file for an aggregator running outside the cluster; a
   * relative path is resolved against the config file's folder. Absent: the
   * KUBECONFIG variable, else the in-cluster service account.
   */
  kubeconfig?: string;
}

/**
 * A pool whose pods are those of a Gateway API Inference Extension
 * InferencePool (inference.networking.k8s.io/v1): its selector and first
 * target port, followed as the object changes (host/discovery/inference-pool.ts).
 */
export interface InferencePoolRefConfig {
  namespace: string;
  name: string;
  /** As KubernetesPoolConfig.kubeconfig. */
  kubeconfig?: string;
}

/** When a pod counts as saturated, and how long a refused client is told to wait (proto Admission). */
export interface AdmissionConfig {
  enabled: boolean;
  /** Requests ahead of a new one on a pod (core/fleet/snapshot.ts, requestsAhead) at which a Standard request is refused. */
  maxWaiting: number;
  /** KV usage (0..1) at which a pod that already queues is saturated. */
  maxKvCache: number;
  /** Sheddable's queue limit = maxWaiting x this (0..1]. */
  sheddableFactor: number;
  /** Critical's queue limit = maxWaiting x this (>= 1). */
  criticalFactor: number;
  /** The computed Retry-After is capped here. */
  maxRetryAfterS: number;
  /** How long the gateway may hold a request of each class while its pool has no room (0: refuse at once). */
  waitCriticalMs: number;
  waitStandardMs: number;
  waitSheddableMs: number;
}

/**
 * How long one try on a pod may take before its first response byte (proto
 * Deadlines; the filter computes it per request and sets Envoy's per-try
 * timeout), and how long a streamed response may stall (Envoy's per-try idle timeout).
 */
export interface DeadlinesConfig {
  /** The part every request gets: queueing and scheduling before the prompt is read. */
  firstByteMs: number;
  /** Added per 1000 prompt tokens: the prefill. */
  promptMsPerKToken: number;
  /** Added per output token when the response is not streamed (its first byte is its last). */
  outputMsPerToken: number;
  /** The output tokens of a request that sets no max_tokens. */
  assumedOutputTokens: number;
  /** A streamed response silent this long is cut; before its first byte, tried on the next pod. */
  streamIdleMs: number;
}

/** How a kind of traffic is scored, admitted and timed out. */
export interface ProfileConfig {
  weights: ScorerWeights;
  admission: AdmissionConfig;
  deadlines: DeadlinesConfig;
}

export const PRIORITIES = ["critical", "standard", "sheddable"] as const;
/** Flow-control class, from most to least protected. */
export type Priority = (typeof PRIORITIES)[number];

/** One target of a canary split (InferenceModelRewrite). */
export interface SplitTarget {
  /** A served name: a pool's baseModel or adapter. */
  model: string;
  weight: number;
}

/** Envoy route settings for one model name (matched on x-gateway-model-name). */
export interface ModelRouteConfig {
  /** The whole response, streamed ones included; absent = no timeout, like the pool's route. */
  timeoutMs?: number;
  /** Envoy's local rate limit: a token bucket per Envoy process, refilled every second. */
  rateLimit?: { requestsPerS: number; burst: number };
}

/** A `models:` entry: settings for a served name, or a virtual name that splits. */
export interface ModelConfig {
  name: string;
  /** Absent: the profile of the pool the model's requests land in. */
  profile?: string;
  /** The class of a request that asks for none. */
  priority: Priority;
  split?: SplitTarget[];
  route?: ModelRouteConfig;
}

/** Who may use a request-level privilege: everyone, no one, or clients whose verified JWT carries a claim value. */
export type ClaimGate<Open extends string, Closed extends string> = Open | Closed | { claim: string; values: string[] };

export interface TrafficConfig {
  /** Who may ask for the Critical class; others are served at the model's default class. */
  critical: ClaimGate<"any", "none">;
  /** Debug output on every response ("all"), never ("off"), or for requests that ask and may. */
  debug: ClaimGate<"all", "off">;
  /**
   * Whose fair share of a hold queue a request draws on: nobody's (one
   * share for all), the client's x-llm-tenant header, or a verified JWT claim.
   */
  tenant: "none" | "header" | { claim: string };
  /** What each Envoy worker may hold while pools have no room (the bodies wait in Envoy's buffers). */
  queue: { maxBytesPerWorker: number; maxRequestsPerWorker: number };
}

export interface GatewayConfig {
  /** The file's own version, or the InferenceGatewayConfig resource's group/version (host/kubernetes/crd.ts). */
  apiVersion: "llm-gateway/v1" | "llm-gateway.io/v1";
  kind: "InferenceGatewayConfig";
  gateway: GatewayListenerConfig;
  aggregator: AggregatorConfig;
  pools: PoolConfig[];
  /** Every profile by name, the built-ins included, with the file's overrides applied. */
  profiles: Record<string, ProfileConfig>;
  /** The file's `models:` entries, in file order (empty when it has none). */
  models: ModelConfig[];
  traffic: TrafficConfig;
}

export class ConfigError extends Error {
  constructor(
    readonly source: string,
    /** One `path: message` line per problem. */
    readonly issues: string[],
  ) {
    super(`${source}: invalid gateway config:\n  ${issues.join("\n  ")}`);
    this.name = "ConfigError";
  }
}

export interface HostPort {
  /** Hostname, IPv4 literal, or IPv6 literal without brackets. */
  host: string;
  port: number;
}
