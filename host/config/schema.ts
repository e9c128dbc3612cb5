// The config file's schema: every section as zod validates it, each error
// naming its field's path.
import * as z from "zod";
import { CONTRACT } from "../contract.js";
import { isLabelKey, isLabelValue, LABEL_KEY_TEXT, LABEL_VALUE_TEXT, matchLabelsSelector, selectorProblem } from "../discovery/label-selector.js";
import { msg } from "../validation.js";
import { aggregatorTlsSchema, controlPlaneClientTlsSchema, maxStreamsSchema } from "./control-plane.js";
import { edgeLimitsSchema, listenerTlsSchema, podTlsSchema } from "./edge.js";
import { endpoint, endpointEntry, engine, host, name, port, positiveInt, refined, SHARE_TEXT } from "./fields.js";
import { jwtSchema } from "./jwt.js";
import { leaderElectionSchema } from "./leader-election.js";
import { bounded, DEFAULT_BATCH_SLOTS, intUpTo, partialWeightsSchema, profileSchema } from "./profiles.js";
import { accessLogSchema, tracingSchema } from "./telemetry.js";
import { PRIORITIES, type PoolConfig, type ScorerWeights } from "./types.js";

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
