// The declarative gateway config (one YAML resource, kind InferenceGatewayConfig).
// Parsed with `yaml`, validated with zod; every error names the offending field
// path, e.g. `pools[1].weights.queue: expected a number >= 0`.
import { lookup } from "node:dns/promises";
import { readFileSync } from "node:fs";
import { isIP, isIPv4, isIPv6 } from "node:net";
import { dirname, resolve } from "node:path";
import * as z from "zod";
import { CONTRACT } from "./contract.js";
import { isLabelKey, isLabelValue, LABEL_KEY_TEXT, LABEL_VALUE_TEXT, matchLabelsSelector, selectorProblem } from "./discovery/label-selector.js";
import { checkEdge, edgeLimitsSchema, listenerTlsSchema, podTlsSchema, resolveEdgePaths, type EdgeLimitsConfig, type ListenerTlsConfig, type PodTlsConfig } from "./config/edge.js";
import { SCORERS } from "./scorers.generated.js";
import { msg, validateYaml } from "./validation.js";
import {
  aggregatorTlsSchema,
  controlPlaneClientTlsSchema,
  controlPlaneIssues,
  maxStreamsSchema,
  resolveControlPlanePaths,
  type AggregatorTlsConfig,
  type ControlPlaneClientTlsConfig,
} from "./config/control-plane.js";
import { jwtSchema, type JwtConfig } from "./config/jwt.js";
import { leaderElectionIssues, leaderElectionSchema, type LeaderElectionConfig } from "./config/leader-election.js";

import { accessLogSchema, tracingSchema, type AccessLogConfig, type TracingConfig } from "./config/telemetry.js";

export type { AccessLogConfig, JwtConfig, TracingConfig };

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

const HOSTNAME = /^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;

/** An IPv4/IPv6 literal (no brackets) or a syntactically valid DNS name. */
function isHostText(host: string): boolean {
  if (isIPv6(host)) return true;
  // All-numeric names would be taken for (bad) IPv4 literals by resolvers.
  return /^[\d.]+$/.test(host) ? isIPv4(host) : HOSTNAME.test(host);
}

/** Splits `host:port` / `[v6]:port`; returns null when the text is not one. */
export function parseEndpoint(text: string): HostPort | null {
  const m = /^(?:\[([^\]]+)\]|([^:\[\]]+)):(\d{1,5})$/.exec(text);
  if (!m) return null;
  const port = Number(m[3]);
  if (port < 1 || port > 65535) return null;
  if (m[1] !== undefined) return isIPv6(m[1]) ? { host: m[1], port } : null;
  const host = m[2];
  return isHostText(host) ? { host, port } : null;
}

/** Formats ip/port for an address string, bracketing IPv6. */
export function formatHostPort(host: string, port: number): string {
  return isIPv6(host) ? `[${host}]:${port}` : `${host}:${port}`;
}

const port = (allowZero: boolean) => {
  const text = `expected an integer port ${allowZero ? 0 : 1}..65535`;
  return z.number({ error: msg(text) }).int({ error: text }).min(allowZero ? 0 : 1, { error: text }).max(65535, { error: text });
};
const positiveInt = z.number({ error: msg("expected an integer > 0") }).int({ error: "expected an integer > 0" }).min(1, { error: "expected an integer > 0" });
const SHARE_TEXT = "expected an integer 0..60000 (milliseconds; 0: no sharing between Envoy replicas)";
const weight = z.number({ error: msg("expected a number >= 0") }).min(0, { error: "expected a number >= 0" });
const HOST_TEXT = "expected a host name or IP address";
const host = z.string({ error: msg(HOST_TEXT) }).refine(isHostText, { error: HOST_TEXT });
// Model and pool names travel in JSON bodies, headers and metric labels: keep them plain.
const NAME_TEXT = "expected a non-empty name of letters, digits and . _ - : / (no spaces)";
const PLAIN_NAME = /^[A-Za-z0-9][A-Za-z0-9._:\/-]{0,255}$/;
const name = z.string({ error: msg(NAME_TEXT) }).regex(PLAIN_NAME, { error: NAME_TEXT });
const engine = z.enum(ENGINES, { error: msg(`expected one of ${ENGINES.join(", ")}`) });
const ENDPOINT_TEXT = "expected host:port (e.g. 127.0.0.1:8000, vllm-0:8000, [::1]:8000)";
const endpoint = z.string({ error: msg(ENDPOINT_TEXT) }).refine((s) => parseEndpoint(s) !== null, { error: ENDPOINT_TEXT });
const CAPACITY_TEXT = "expected a number > 0 (the pod's speed relative to the pool's others)";
const ENDPOINT_ENTRY_TEXT = "expected host:port, or { address: host:port, capacity: number > 0 }";
/**
 * A field checked by a refinement rather than a typed schema: in a union, a
 * type error would drop the whole reading and blame the entry, not the field.
 */
const refined = <T>(ok: (v: unknown) => boolean, text: string) =>
  z
    .unknown()
    .refine(ok, { error: (iss) => (iss.input === undefined ? "is required" : text) })
    .transform((v) => v as T);
/**
 * `host:port`, or `{ address, capacity }` to state a pod's relative speed
 * (e.g. 0.35 for an A10G beside H100s at 1). If any endpoint of a pool gives
 * a capacity, the pool uses configured values only, 1 where none is given,
 * never a learned one: learned rates (tokens/s) and configured ones do not mix.
 */
const endpointEntry = z.union(
  [
    endpoint,
    z.strictObject({
      address: refined<string>((v) => typeof v === "string" && parseEndpoint(v) !== null, ENDPOINT_TEXT),
      capacity: refined<number>((v) => typeof v === "number" && Number.isFinite(v) && v > 0, CAPACITY_TEXT).optional(),
    }),
  ],
  { error: msg(ENDPOINT_ENTRY_TEXT) },
);

/** A pool's batchSlots when the file gives none: the engine's own default batch limit. */
export const DEFAULT_BATCH_SLOTS: Readonly<Record<Engine, number>> = {
  // vLLM's max_num_seqs below 70 GB of GPU memory and on A100s; H100-class
  // GPUs default to 1024, so state batchSlots for those.
  vllm: 256,
  // SGLang sizes max_running_requests from KV memory (no fixed default); as vLLM's.
  sglang: 256,
  // TGI leaves max_batch_size unset and its router admits at most
  // max_concurrent_requests (default 128), so no more run at once.
  tgi: 128,
  // llama-server's -np/--parallel: auto (-1) becomes 4 slots (tools/server/server.cpp).
  llamacpp: 4,
  // TensorRT-LLM's max_batch_size default (tensorrt_llm/builder.py BuildConfig, trtllm-serve): 2048.
  trtllm: 2048,
};

/** Each scorer's weight in a built-in profile, as its scorer.json states it (docs/scorers.md says why). */
const builtinWeights = (profile: "latency" | "throughput"): ScorerWeights =>
  Object.fromEntries(SCORERS.map((s) => [s.name, s.defaultWeight[profile]])) as ScorerWeights;

/** The scorers' default weights: the latency profile's. */
export const DEFAULT_WEIGHTS: Readonly<ScorerWeights> = builtinWeights("latency");

/**
 * The two profiles that always exist; a `profiles:` entry of the same name
 * overrides their fields, and a new profile starts from `latency`. The
 * numbers are starting points, retuned on the simulator (BENCHMARKS.md).
 */
export const BUILTIN_PROFILES = {
  /** Chat: a person waits for the first token. */
  latency: {
    weights: DEFAULT_WEIGHTS,
    admission: {
      enabled: true,
      // One request waiting per pod: what waits beyond it waits in the
      // gateway, where its pod is chosen when one has room (late binding),
      // and the one queued on the pod fills its next free batch slot before
      // the gateway's next tick can, so throughput is kept.
      maxWaiting: 1,
      // vLLM preempts running sequences when KV blocks run out; a pod that
      // queues at 95% would recompute work, not gain any.
      maxKvCache: 0.95,
      // Sheddable is refused as soon as every pod queues at all.
      sheddableFactor: 0.5,
      // Critical may queue twice as deep: admitted after Standard is refused
      // (and after a Standard request's retry, whose limit is halfway), its
      // wait still bounded.
      criticalFactor: 2,
      // The OpenAI SDKs honour a Retry-After under 60 s and fall back to
      // their own half-second backoff from 60 s up (openai-node's
      // retryRequest), so 59 is the longest wait they keep.
      maxRetryAfterS: 59,
      // Held in the gateway while no pod has room, at most: a person waiting
      // on a chat answer gives up within tens of seconds, so past these a
      // request is better told when to come back. Critical waits longest
      // (it is what the operator promised); Sheddable rides out a burst and
      // is refused first when the pool stays full.
      waitCriticalMs: 60_000,
      waitStandardMs: 30_000,
      waitSheddableMs: 10_000,
    },
    deadlines: {
      // Queueing and scheduling on a busy pod, well past a healthy one's first token.
      firstByteMs: 20_000,
      // 0.5 ms per prompt token: a slow GPU's prefill of a 70B model, so a 100k-token prompt adds 50 s.
      promptMsPerKToken: 500,
      // 10 tokens/s: a loaded slow pod's decode, with headroom.
      outputMsPerToken: 100,
      // A chat answer rarely runs past 2k tokens.
      assumedOutputTokens: 2048,
      // A decoding pod sends a token every fraction of a second, but an engine
      // may send a stream's headers before its prefill, and a 100k-token prompt
      // on a slow GPU may then be silent for firstByteMs + 50 s: 90 s covers it.
      streamIdleMs: 90_000,
    },
  },
  /** Batch: work done per GPU-second matters, a single request's wait less. */
  throughput: {
    // Prefix and adapter locality save prefill and adapter loads, the work
    // batch jobs repeat most; the running batch size barely changes
    // throughput under continuous batching, so it does not score.
    weights: builtinWeights("throughput"),
    admission: {
      enabled: true,
      // Deep queues keep every batch full; a batch job tolerates the wait.
      maxWaiting: 32,
      // Fuller caches are worth an occasional preemption for batch work.
      maxKvCache: 0.98,
      sheddableFactor: 0.5,
      criticalFactor: 2,
      // As for latency: the OpenAI SDKs ignore a Retry-After of 60 s or more.
      maxRetryAfterS: 59,
      // A batch job waits minutes (firstByteMs below allows five). Held plus
      // served must stay within the OpenAI SDKs' own timeout and Envoy's
      // stream idle timeout (10 minutes each), so Critical waits 5 at most.
      waitCriticalMs: 300_000,
      waitStandardMs: 180_000,
      waitSheddableMs: 60_000,
    },
    deadlines: {
      // Deep queues (maxWaiting 32) mean minutes before a request is scheduled.
      firstByteMs: 300_000,
      // Batch pools may be the slowest GPUs: twice latency's allowance.
      promptMsPerKToken: 1000,
      // 5 tokens/s: a full batch on a slow pod decodes slowly.
      outputMsPerToken: 200,
      // Batch jobs (summaries, extraction) run long.
      assumedOutputTokens: 4096,
      // A stream in a full batch may pause while long prefills run.
      streamIdleMs: 300_000,
    },
  },
} as const satisfies Record<string, ProfileConfig>;

const partialWeightsSchema = z.strictObject(
  Object.fromEntries(SCORERS.map((s) => [s.name, weight.optional()])) as Record<ScorerName, z.ZodOptional<typeof weight>>,
);

/** A number in a range; `text` is the whole message. */
const bounded = (text: string, ok: (v: number) => boolean) => z.number({ error: msg(text) }).refine(ok, { error: text });

/**
 * A wait budget: 0 (never hold) up to just under Envoy's stream idle timeout
 * (600 s in envoy/gateway.yaml): a held stream is silent, and one held longer
 * would be cut with a 408 before its 429.
 */
function waitBudget() {
  const text = "expected an integer 0..599000 (ms; 0 refuses at once; a held stream is silent, and Envoy cuts one silent for 600 s)";
  return bounded(text, (v) => Number.isInteger(v) && v >= 0 && v <= 599_000).optional();
}

const admissionSchema = z.strictObject({
  enabled: z.boolean({ error: msg("expected true or false") }).optional(),
  maxWaiting: bounded("expected a number > 0", (v) => v > 0 && Number.isFinite(v)).optional(),
  maxKvCache: bounded("expected a number in (0, 1]", (v) => v > 0 && v <= 1).optional(),
  sheddableFactor: bounded("expected a number in (0, 1]", (v) => v > 0 && v <= 1).optional(),
  criticalFactor: bounded("expected a number >= 1", (v) => v >= 1 && Number.isFinite(v)).optional(),
  // Up to an hour for clients that honour long waits; the OpenAI SDKs ignore a Retry-After of 60 s or more.
  maxRetryAfterS: bounded("expected an integer 1..3600", (v) => Number.isInteger(v) && v >= 1 && v <= 3600).optional(),
  waitCriticalMs: waitBudget(),
  waitStandardMs: waitBudget(),
  waitSheddableMs: waitBudget(),
});

/** An integer in 1..max; `text` names the range. */
const intUpTo = (max: number) => {
  const text = `expected an integer 1..${max}`;
  return bounded(text, (v) => Number.isInteger(v) && v >= 1 && v <= max).optional();
};
const HOUR_MS = 3_600_000;

const deadlinesSchema = z.strictObject({
  firstByteMs: intUpTo(HOUR_MS),
  promptMsPerKToken: intUpTo(HOUR_MS),
  outputMsPerToken: intUpTo(HOUR_MS),
  assumedOutputTokens: intUpTo(1_000_000),
  streamIdleMs: intUpTo(HOUR_MS),
});

const profileSchema = z.strictObject({
  weights: partialWeightsSchema.optional(),
  admission: admissionSchema.optional(),
  deadlines: deadlinesSchema.optional(),
});

const SPLIT_WEIGHT_TEXT = "expected an integer 1..1000000";
const modelSchema = z.strictObject({
  name,
  profile: name.optional(),
  priority: z.enum(PRIORITIES, { error: msg(`expected one of ${PRIORITIES.join(", ")}`) }).default("standard"),
  split: z
    .array(
      z.strictObject({
        model: name,
        weight: bounded(SPLIT_WEIGHT_TEXT, (v) => Number.isInteger(v) && v >= 1 && v <= 1_000_000),
      }),
      { error: msg("expected a list of { model, weight }") },
    )
    .min(1, { error: "expected at least one target" })
    .optional(),
  route: z
    .strictObject({
      timeoutMs: positiveInt.optional(),
      rateLimit: z.strictObject({ requestsPerS: positiveInt, burst: positiveInt.optional() }).optional(),
    })
    .refine((r) => r.timeoutMs !== undefined || r.rateLimit !== undefined, { error: "expected timeoutMs or rateLimit" })
    .optional(),
});

const CLAIM_TEXT = "expected a JWT claim name (nested claims as a.b)";
const VALUES_TEXT = "expected a non-empty list of claim values (strings without commas)";
/** `{ claim, values }`: fields checked by refinement, so a bad one is named inside the union. */
const claimGateSchema = z.strictObject({
  claim: refined<string>((v) => typeof v === "string" && /^[^\s,]+$/.test(v), CLAIM_TEXT),
  values: refined<string[]>(
    (v) => Array.isArray(v) && v.length > 0 && v.every((x) => typeof x === "string" && x !== "" && !x.includes(",")),
    VALUES_TEXT,
  ),
});
const gateSchema = <W extends readonly [string, string]>(words: W) =>
  z.union([z.enum(words), claimGateSchema], { error: msg(`expected ${words.join(" or ")}, or { claim, values }`) });

const NAMESPACE_TEXT = "expected a namespace name (lower-case letters, digits and -, 63 characters at most)";
const SELECTOR_TEXT = 'expected { matchLabels: { label: value, ... } } or a selector string such as "app=vllm"';

/** Where a selector as the file gives it is wrong: [path below `selector`, message] pairs. */
function selectorIssues(v: unknown): Array<[PropertyKey[], string]> {
  if (v === undefined) return [[[], "is required"]];
  if (typeof v === "string") {
    const problem = selectorProblem(v);
    return problem ? [[[], problem]] : [];
  }
  if (typeof v !== "object" || v === null || Array.isArray(v)) return [[[], SELECTOR_TEXT]];
  const unknown = Object.keys(v).filter((k) => k !== "matchLabels");
  if (unknown.length > 0) return [[[], `unknown field${unknown.length > 1 ? "s" : ""} ${unknown.map((k) => JSON.stringify(k)).join(", ")} (${SELECTOR_TEXT})`]];
  const labels = (v as { matchLabels?: unknown }).matchLabels;
  if (typeof labels !== "object" || labels === null || Array.isArray(labels) || Object.keys(labels).length === 0) {
    return [[["matchLabels"], "expected a non-empty mapping of label: value (an empty selector selects every pod in the namespace)"]];
  }
  return Object.entries(labels).flatMap(([key, value]): Array<[PropertyKey[], string]> => {
    if (!isLabelKey(key)) return [[["matchLabels", key], LABEL_KEY_TEXT]];
    return isLabelValue(value) ? [] : [[["matchLabels", key], LABEL_VALUE_TEXT]];
  });
}

const selectorSchema = z
  .unknown()
  .superRefine((v, ctx) => {
    for (const [path, message] of selectorIssues(v)) ctx.addIssue({ code: "custom", message, path });
  })
  .transform((v) => (typeof v === "string" ? v.trim() : matchLabelsSelector((v as { matchLabels: Record<string, string> }).matchLabels)));

const kubernetesSchema = z.strictObject({
  namespace: z
    .string({ error: msg(NAMESPACE_TEXT) })
    .regex(/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/, { error: NAMESPACE_TEXT }),
  selector: selectorSchema,
  port: port(false),
  kubeconfig: z.string({ error: msg("expected the path of a kubeconfig file") }).min(1, { error: "expected the path of a kubeconfig file" }).optional(),
});

const inferencePoolSchema = z.strictObject({
  namespace: kubernetesSchema.shape.namespace,
  name: z.string({ error: msg(NAMESPACE_TEXT) }).regex(/^[a-z0-9]([-.a-z0-9]{0,251}[a-z0-9])?$/, { error: "expected an object name (lower case letters, digits, '-' and '.')" }),
  kubeconfig: kubernetesSchema.shape.kubeconfig,
});

const poolSchema = z
  .strictObject({
    name,
    baseModel: name,
    engine: engine.default("vllm"),
    adapters: z.array(name, { error: msg("expected a list of adapter names") }).default([]),
    profile: name.default("latency"),
    weights: partialWeightsSchema.default({}),
    endpoints: z.array(endpointEntry, { error: msg("expected a list of host:port") }).min(1, { error: "expected at least one endpoint" }).optional(),
    kubernetes: kubernetesSchema.optional(),
    inferencePool: inferencePoolSchema.optional(),
    batchSlots: intUpTo(100_000),
    tls: podTlsSchema.optional(),
  })
  // A pool's pods come from one place: two sources would each report the whole set and overwrite the other's.
  .superRefine((pool, ctx) => {
    const given = (["endpoints", "kubernetes", "inferencePool"] as const).filter((k) => pool[k] !== undefined);
    if (given.length > 1) {
      ctx.addIssue({ code: "custom", path: [given[1]], message: `a pool takes its pods from ${given[0]} or from ${given[1]}, not both` });
    } else if (given.length === 0) {
      ctx.addIssue({ code: "custom", path: ["endpoints"], message: "is required (or kubernetes: { namespace, selector, port } to discover the pool's pods by label)" });
    }
  })
  .transform(({ endpoints, kubernetes, inferencePool, batchSlots, ...rest }): Omit<PoolConfig, "weights" | "weightOverrides"> & { weights: Partial<ScorerWeights> } => {
    const pool = { ...rest, batchSlots: batchSlots ?? DEFAULT_BATCH_SLOTS[rest.engine] };
    if (kubernetes) return { ...pool, endpoints: [], kubernetes };
    if (inferencePool) return { ...pool, endpoints: [], inferencePool };
    const entries = (endpoints ?? []).map((e) => (typeof e === "string" ? { address: e, capacity: undefined } : e));
    const configured = entries.some((e) => e.capacity !== undefined);
    return {
      ...pool,
      endpoints: entries.map((e) => e.address),
      ...(configured ? { capacities: entries.map((e) => e.capacity ?? 1) } : {}),
    };
  });

/** The whole file's schema; exported so scripts/docs/config-reference.mjs can list its fields and defaults. */
export const configSchema = z.strictObject({
  apiVersion: z.enum(["llm-gateway/v1", "llm-gateway.io/v1"], { error: 'expected "llm-gateway/v1" or "llm-gateway.io/v1"' }).default("llm-gateway/v1"),
  kind: z.literal("InferenceGatewayConfig", { error: 'expected "InferenceGatewayConfig"' }).default("InferenceGatewayConfig"),
  gateway: z
    .strictObject({
      host: host.default("127.0.0.1"),
      port: port(true).default(8080),
      adminPort: port(true).default(9901),
      statsPort: port(false).optional(),
      // The filter refuses a larger limit (and Envoy the filter with it), so the config must too.
      maxBodyBytes: positiveInt
        .max(CONTRACT.limits.maxBodyBytes, { error: `expected at most ${CONTRACT.limits.maxBodyBytes} (the filter's limit)` })
        .default(4 * 1024 * 1024),
      staleView: z
        .strictObject({
          maxAgeMs: positiveInt.default(3000),
          policy: z.enum(["failOpen", "reject"], { error: msg("expected failOpen or reject") }).default("failOpen"),
          retryAfterS: positiveInt.default(1),
        })
        .prefault({}),
      passiveHealth: z
        .strictObject({
          ejectAfterFailures: positiveInt.default(3),
          ejectMs: positiveInt.default(10_000),
          saturatedBackoffMs: positiveInt.default(1_000),
        })
        .prefault({}),
      jwt: jwtSchema.optional(),
      accessLog: accessLogSchema.optional(),
      tracing: tracingSchema.optional(),
      controlPlaneTls: controlPlaneClientTlsSchema.optional(),
      tls: listenerTlsSchema.optional(),
      plaintext: z.boolean({ error: msg("expected true or false") }).default(false),
      limits: edgeLimitsSchema,
    })
    .prefault({}),
  aggregator: z
    .strictObject({
      host: host.default("127.0.0.1"),
      port: port(true).default(50051),
      metricsPort: port(true).default(9464),
      scrapeIntervalMs: positiveInt.default(50),
      scrapeTimeoutMs: positiveInt.default(1000),
      staleAfterMs: positiveInt.default(1000),
      heartbeatMs: positiveInt.default(1000),
      tls: aggregatorTlsSchema.optional(),
      plaintext: z.boolean().default(false),
      maxStreams: maxStreamsSchema,
      leaderElection: leaderElectionSchema(endpoint).optional(),
      shareIntervalMs: z.number({ error: msg(SHARE_TEXT) }).int({ error: SHARE_TEXT }).min(0, { error: SHARE_TEXT }).max(60_000, { error: SHARE_TEXT }).default(20),
    })
    .prefault({}),
  pools: z.array(poolSchema, { error: msg("expected a list of pools") }).min(1, { error: "expected at least one pool" }),
  profiles: z.record(z.string(), profileSchema, { error: msg("expected a mapping of profile names") }).default({}),
  models: z.array(modelSchema, { error: msg("expected a list of models") }).default([]),
  traffic: z
    .strictObject({
      critical: gateSchema(["any", "none"] as const).default("none"),
      debug: gateSchema(["all", "off"] as const).default("off"),
      tenant: z
        .union([z.enum(["none", "header"]), z.strictObject({ claim: claimGateSchema.shape.claim })], {
          error: msg("expected none, header or { claim }"),
        })
        .default("none"),
      queue: z
        .strictObject({
          // 64 MiB: 16,000 chat bodies of 4 KiB, or 64 long-context prompts of 1 MiB.
          maxBytesPerWorker: z.number().int().min(0).max(2 ** 40).default(64 * 1024 * 1024),
          // The filter keeps ~1 KiB per held request in its VM.
          maxRequestsPerWorker: z.number().int().min(0).max(1_000_000).default(4096),
        })
        .prefault({}),
    })
    .prefault({}),
});

type RawConfig = z.output<typeof configSchema>;

/** Checks that need the whole document: uniqueness and cross references. */
function crossCheck(raw: RawConfig): string[] {
  const issues: string[] = [];
  const poolIndex = new Map<string, number>();
  raw.pools.forEach((pool, i) => {
    if (poolIndex.has(pool.name)) issues.push(`pools[${i}].name: duplicate pool name "${pool.name}" (also pools[${poolIndex.get(pool.name)}])`);
    else poolIndex.set(pool.name, i);
  });

  // Clients address pools by model name, so a name must lead to exactly one place.
  const modelOwner = new Map<string, string>();
  raw.pools.forEach((pool, i) => {
    const names: Array<[string, string]> = [[pool.baseModel, `pools[${i}].baseModel`]];
    pool.adapters.forEach((a, j) => names.push([a, `pools[${i}].adapters[${j}]`]));
    for (const [model, path] of names) {
      const owner = modelOwner.get(model);
      if (owner) issues.push(`${path}: model name "${model}" is already used by ${owner}`);
      else modelOwner.set(model, path);
    }
    const seen = new Map<string, number>();
    pool.endpoints.forEach((ep, j) => {
      if (seen.has(ep)) issues.push(`pools[${i}].endpoints[${j}]: duplicate endpoint "${ep}" (also endpoints[${seen.get(ep)}])`);
      else seen.set(ep, j);
    });
  });

  const { adminPort, statsPort, port: listenerPort } = raw.gateway;
  if (statsPort !== undefined && adminPort === 0) issues.push("gateway.statsPort: needs a fixed gateway.adminPort (the stats listener forwards to it), not 0");
  if (statsPort !== undefined && (statsPort === adminPort || statsPort === listenerPort)) issues.push(`gateway.statsPort: ${statsPort} is already gateway.${statsPort === adminPort ? "adminPort" : "port"}`);
  issues.push(...checkTraffic(raw));
  issues.push(...checkEdge(raw.gateway, longestHoldMs(resolveProfiles(raw.profiles))));

  const agg = raw.aggregator;
  if (raw.gateway.staleView.maxAgeMs <= agg.heartbeatMs) {
    issues.push(`gateway.staleView.maxAgeMs: must be greater than aggregator.heartbeatMs (${agg.heartbeatMs}), or a quiet but healthy aggregator looks lost between heartbeats`);
  }
  issues.push(...controlPlaneIssues(raw));
  issues.push(...leaderElectionIssues(agg.leaderElection, raw.gateway.staleView.maxAgeMs));
  if (agg.staleAfterMs <= agg.scrapeIntervalMs) {
    issues.push(`aggregator.staleAfterMs: must be greater than scrapeIntervalMs (${agg.scrapeIntervalMs}), or every endpoint flaps between fresh and stale`);
  }
  return issues;
}

/** The longest a profile lets the gateway hold a request. */
function longestHoldMs(profiles: Record<string, ProfileConfig>): number {
  return Math.max(...Object.values(profiles).map(({ admission: a }) => Math.max(a.waitCriticalMs, a.waitStandardMs, a.waitSheddableMs)));
}

/** Served model names (each pool's baseModel and adapters), each with the index of the pool that serves it. */
export function servedModels(pools: readonly Pick<PoolConfig, "baseModel" | "adapters">[]): Map<string, number> {
  const served = new Map<string, number>();
  pools.forEach((pool, p) => {
    for (const model of [pool.baseModel, ...pool.adapters]) if (!served.has(model)) served.set(model, p);
  });
  return served;
}

/**
 * Indexes of the pools a model's requests can land in, in first-seen order:
 * its split targets' pools, or its own pool when it does not split.
 */
export function landingPools(model: Pick<ModelConfig, "name" | "split">, served: ReadonlyMap<string, number>): number[] {
  const names = model.split ? model.split.map((t) => t.model) : [model.name];
  const pools: number[] = [];
  for (const n of names) {
    const p = served.get(n);
    if (p !== undefined && !pools.includes(p)) pools.push(p);
  }
  return pools;
}

/** Profiles, models and traffic gates: names that must lead somewhere, and gates that need a JWT. */
function checkTraffic(raw: RawConfig): string[] {
  const issues: string[] = [];
  const profileNames = new Set<string>(Object.keys(BUILTIN_PROFILES));
  for (const key of Object.keys(raw.profiles)) {
    if (PLAIN_NAME.test(key)) profileNames.add(key);
    else issues.push(`profiles.${key}: ${NAME_TEXT}`);
  }
  const known = [...profileNames].join(", ");
  const checkProfile = (path: string, profile: string | undefined) => {
    if (profile !== undefined && !profileNames.has(profile)) issues.push(`${path}: unknown profile "${profile}" (profiles: ${known})`);
  };
  raw.pools.forEach((pool, i) => checkProfile(`pools[${i}].profile`, pool.profile));

  const served = servedModels(raw.pools);
  const listed = new Map<string, number>();
  raw.models.forEach((model, i) => {
    const path = `models[${i}]`;
    if (listed.has(model.name)) issues.push(`${path}.name: model "${model.name}" is listed twice (also models[${listed.get(model.name)}])`);
    else listed.set(model.name, i);
    if (!served.has(model.name) && !model.split) {
      issues.push(`${path}.name: unknown model "${model.name}": not a pool's baseModel or adapter, and no split to make it a virtual name`);
    }
    checkProfile(`${path}.profile`, model.profile);
    const targets = new Map<string, number>();
    model.split?.forEach((target, j) => {
      const at = `${path}.split[${j}].model`;
      if (targets.has(target.model)) issues.push(`${at}: "${target.model}" is already a target (split[${targets.get(target.model)}])`);
      else targets.set(target.model, j);
      if (!served.has(target.model)) issues.push(`${at}: "${target.model}" is not served by any pool (a split target must be a pool's baseModel or adapter)`);
    });
    const limit = model.route?.rateLimit;
    if (limit?.burst !== undefined && limit.burst < limit.requestsPerS) {
      issues.push(`${path}.route.rateLimit.burst: must be >= requestsPerS (${limit.requestsPerS}), or the bucket caps the rate below it`);
    }
    const pools = landingPools(model, served);
    if (limit && pools.length > 1) {
      // Envoy keeps one token bucket per route, and this model would need one route per pool.
      issues.push(`${path}.route.rateLimit: the split lands in several pools (${pools.map((p) => raw.pools[p].name).join(", ")}); a rate limit needs all targets in one pool`);
    }
  });

  for (const gate of ["critical", "debug", "tenant"] as const) {
    if (typeof raw.traffic[gate] === "object" && !raw.gateway.jwt) {
      issues.push(`traffic.${gate}: a claim gate needs gateway.jwt (claims are only trusted from verified tokens)`);
    }
  }
  return issues;
}

/** Fields present in a partial object (zod leaves absent optional fields out, but be sure). */
function givenFields<T extends object>(partial: Partial<T> | undefined): Partial<T> {
  return Object.fromEntries(Object.entries(partial ?? {}).filter(([, v]) => v !== undefined)) as Partial<T>;
}

/** The built-ins with the file's overrides; a new profile starts from the (overridden) latency profile. */
function resolveProfiles(given: RawConfig["profiles"]): Record<string, ProfileConfig> {
  const out = new Map<string, ProfileConfig>(
    Object.entries(BUILTIN_PROFILES).map(([n, p]) => [n, { weights: { ...p.weights }, admission: { ...p.admission }, deadlines: { ...p.deadlines } }]),
  );
  const entries = Object.entries(given).sort(([a], [b]) => Number(b === "latency") - Number(a === "latency"));
  for (const [n, p] of entries) {
    const base = out.get(n) ?? out.get("latency")!;
    out.set(n, {
      weights: { ...base.weights, ...givenFields(p.weights) },
      admission: { ...base.admission, ...givenFields(p.admission) },
      deadlines: { ...base.deadlines, ...givenFields(p.deadlines) },
    });
  }
  return Object.fromEntries(out);
}

function resolveModel(m: RawConfig["models"][number]): ModelConfig {
  const out: ModelConfig = { name: m.name, priority: m.priority };
  if (m.profile !== undefined) out.profile = m.profile;
  if (m.split) out.split = m.split.map((t) => ({ model: t.model, weight: t.weight }));
  if (m.route) {
    out.route = {};
    if (m.route.timeoutMs !== undefined) out.route.timeoutMs = m.route.timeoutMs;
    const limit = m.route.rateLimit;
    if (limit) out.route.rateLimit = { requestsPerS: limit.requestsPerS, burst: limit.burst ?? limit.requestsPerS };
  }
  return out;
}

/** Parses and validates config text; `sourceName` prefixes error messages. */
export function parseGatewayConfig(text: string, sourceName = "<config>"): GatewayConfig {
  const result = validateYaml(configSchema, text, crossCheck);
  if ("issues" in result) throw new ConfigError(sourceName, result.issues);
  const raw = result.data;

  const profiles = resolveProfiles(raw.profiles);
  return {
    apiVersion: raw.apiVersion,
    kind: raw.kind,
    gateway: raw.gateway,
    aggregator: raw.aggregator,
    pools: raw.pools.map(({ weights, ...pool }) => {
      const weightOverrides = givenFields<ScorerWeights>(weights);
      return { ...pool, weights: { ...profiles[pool.profile].weights, ...weightOverrides }, weightOverrides };
    }),
    profiles,
    models: raw.models.map(resolveModel),
    traffic: raw.traffic,
  };
}

export function loadGatewayConfig(path: string): GatewayConfig {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    throw new ConfigError(path, [`cannot read file: ${(err as Error).message}`]);
  }
  return parseConfigFile(text, path);
}

/** The text of the config file at `path`: parsed, its relative paths resolved against the file's folder. */
export function parseConfigFile(text: string, path: string): GatewayConfig {
  const config = parseGatewayConfig(text, path);
  const jwt = config.gateway.jwt;
  if (jwt) {
    if (jwt.jwksFile !== undefined) jwt.jwksFile = resolve(dirname(path), jwt.jwksFile);
    jwt.jwksCaFile = resolve(dirname(path), jwt.jwksCaFile);
  }
  resolveControlPlanePaths(config, dirname(path));
  if (config.gateway.tls) config.gateway.tls = resolveEdgePaths(config.gateway.tls, path);
  const lease = config.aggregator.leaderElection?.lease;
  if (lease?.kubeconfig) lease.kubeconfig = resolve(dirname(path), lease.kubeconfig);
  for (const pool of config.pools) {
    if (pool.tls) pool.tls = resolveEdgePaths(pool.tls, path);
    if (pool.kubernetes?.kubeconfig) pool.kubernetes.kubeconfig = resolve(dirname(path), pool.kubernetes.kubeconfig);
    if (pool.inferencePool?.kubeconfig) pool.inferencePool.kubeconfig = resolve(dirname(path), pool.inferencePool.kubeconfig);
  }
  return config;
}

const DNS_TIMEOUT_MS = 5_000;

/** The IP a listening host name stands for: IPv4 first, like the aggregator's endpoint lookups. */
async function resolveHost(host: string): Promise<string> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${DNS_TIMEOUT_MS} ms`)), DNS_TIMEOUT_MS);
  });
  try {
    const answers = await Promise.race([lookup(host, { all: true }), timeout]);
    const pick = answers.find((a) => a.family === 4) ?? answers[0];
    if (!pick) throw new Error("no address");
    return pick.address;
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Replaces gateway.host and aggregator.host by IPs: Envoy's listener only
 * takes an IP, and the port checks must bind what the stack will bind.
 * IP literals pass through without a lookup. Pool endpoints are left as they
 * are: the aggregator resolves them, again and again, as pods come and go.
 */
export async function resolveConfigHosts(config: GatewayConfig, sourceName = "<config>"): Promise<GatewayConfig> {
  const fields = [
    ["gateway.host", config.gateway.host],
    ["aggregator.host", config.aggregator.host],
  ] as const;
  const results = await Promise.all(
    fields.map(async ([field, host]) => {
      if (isIP(host) !== 0) return { ip: host };
      try {
        return { ip: await resolveHost(host) };
      } catch (err) {
        const reason = (err as NodeJS.ErrnoException).code === "ENOTFOUND" ? "" : ` (${(err as Error).message})`;
        return { issue: `${field}: cannot resolve ${JSON.stringify(host)}${reason}` };
      }
    }),
  );
  const issues = results.flatMap((r) => (r.issue ? [r.issue] : []));
  if (issues.length > 0) throw new ConfigError(sourceName, issues);
  const [gateway, aggregator] = results.map((r) => r.ip!);
  return { ...config, gateway: { ...config.gateway, host: gateway }, aggregator: { ...config.aggregator, host: aggregator } };
}
