// The declarative gateway config (one YAML resource, kind InferenceGatewayConfig).
// Parsed with `yaml`, validated with zod; every error names the offending field
// path, e.g. `pools[1].weights.queue: expected a number >= 0`.
import { lookup } from "node:dns/promises";
import { readFileSync } from "node:fs";
import { isIP, isIPv4, isIPv6 } from "node:net";
import { dirname, resolve } from "node:path";
import * as z from "zod";
import { msg, validateYaml } from "./validation.js";

export const ENGINES = ["vllm", "sglang", "tgi"] as const;
export type Engine = (typeof ENGINES)[number];

export interface GatewayListenerConfig {
  host: string;
  port: number;
  adminPort: number;
  maxBodyBytes: number;
  staleView: StaleViewConfig;
  passiveHealth: PassiveHealthConfig;
  /** When set, every request needs a valid JWT (Envoy's jwt_authn). */
  jwt?: JwtConfig;
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
}

export interface JwtConfig {
  issuer: string;
  /** Accepted `aud` values; empty accepts any audience. */
  audiences: string[];
  /** A JWKS file; a relative path is resolved against the config file's folder. */
  jwksFile: string;
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
}

export interface ScorerWeights {
  queue: number;
  kvCache: number;
  running: number;
  lora: number;
  prefix: number;
}

export interface PoolConfig {
  name: string;
  baseModel: string;
  engine: Engine;
  adapters: string[];
  weights: ScorerWeights;
  /** `host:port` or `[v6]:port`; host may be a DNS name, resolved by the aggregator. */
  endpoints: string[];
  /**
   * Relative capacities, one per endpoint, present when the file gives any
   * endpoint of the pool one (the others get 1); absent, the aggregator
   * learns each pod's rate from its metrics. Never mixed: learned rates and
   * configured ones are in different units.
   */
  capacities?: number[];
}

export interface LocalPodConfig {
  name: string;
  pool: string;
  port: number;
  speed: number;
  /** Defaults to the pool's engine. */
  engine: Engine;
}

export interface LocalFleetConfig {
  pods: LocalPodConfig[];
}

export interface GatewayConfig {
  apiVersion: "llm-gateway/v1";
  kind: "InferenceGatewayConfig";
  gateway: GatewayListenerConfig;
  aggregator: AggregatorConfig;
  pools: PoolConfig[];
  /** Present only when the file has a localFleet block. */
  localFleet?: LocalFleetConfig;
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
const weight = z.number({ error: msg("expected a number >= 0") }).min(0, { error: "expected a number >= 0" });
const HOST_TEXT = "expected a host name or IP address";
const host = z.string({ error: msg(HOST_TEXT) }).refine(isHostText, { error: HOST_TEXT });
// Model and pool names travel in JSON bodies, headers and metric labels: keep them plain.
const NAME_TEXT = "expected a non-empty name of letters, digits and . _ - : / (no spaces)";
const name = z.string({ error: msg(NAME_TEXT) }).regex(/^[A-Za-z0-9][A-Za-z0-9._:\/-]{0,255}$/, { error: NAME_TEXT });
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

/** The scorers' default weights (README "Scorers" says why each is what it is). */
export const DEFAULT_WEIGHTS: Readonly<ScorerWeights> = { queue: 2, kvCache: 1, running: 1, lora: 2, prefix: 4 };

const weightsSchema = z.strictObject({
  queue: weight.default(DEFAULT_WEIGHTS.queue),
  kvCache: weight.default(DEFAULT_WEIGHTS.kvCache),
  running: weight.default(DEFAULT_WEIGHTS.running),
  lora: weight.default(DEFAULT_WEIGHTS.lora),
  prefix: weight.default(DEFAULT_WEIGHTS.prefix),
});

const poolSchema = z
  .strictObject({
    name,
    baseModel: name,
    engine: engine.default("vllm"),
    adapters: z.array(name, { error: msg("expected a list of adapter names") }).default([]),
    weights: weightsSchema.prefault({}),
    endpoints: z.array(endpointEntry, { error: msg("expected a list of host:port") }).min(1, { error: "expected at least one endpoint" }),
  })
  .transform(({ endpoints, ...pool }) => {
    const entries = endpoints.map((e) => (typeof e === "string" ? { address: e, capacity: undefined } : e));
    const configured = entries.some((e) => e.capacity !== undefined);
    return {
      ...pool,
      endpoints: entries.map((e) => e.address),
      ...(configured ? { capacities: entries.map((e) => e.capacity ?? 1) } : {}),
    };
  });

const podSchema = z.strictObject({
  name,
  pool: name,
  port: port(false),
  speed: z.number({ error: msg("expected a number > 0") }).positive({ error: "expected a number > 0" }).default(1),
  engine: engine.optional(),
});

const configSchema = z.strictObject({
  apiVersion: z.literal("llm-gateway/v1", { error: 'expected "llm-gateway/v1"' }).default("llm-gateway/v1"),
  kind: z.literal("InferenceGatewayConfig", { error: 'expected "InferenceGatewayConfig"' }).default("InferenceGatewayConfig"),
  gateway: z
    .strictObject({
      host: host.default("127.0.0.1"),
      port: port(true).default(8080),
      adminPort: port(true).default(9901),
      maxBodyBytes: positiveInt.default(4 * 1024 * 1024),
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
        })
        .prefault({}),
      jwt: z
        .strictObject({
          issuer: z.string({ error: msg("expected the token issuer (iss)") }).min(1, { error: "expected the token issuer (iss)" }),
          audiences: z.array(z.string().min(1), { error: msg("expected a list of audiences") }).default([]),
          jwksFile: z.string({ error: msg("expected the path of a JWKS file") }).min(1, { error: "expected the path of a JWKS file" }),
        })
        .optional(),
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
    })
    .prefault({}),
  pools: z.array(poolSchema, { error: msg("expected a list of pools") }).min(1, { error: "expected at least one pool" }),
  localFleet: z.strictObject({ pods: z.array(podSchema, { error: msg("expected a list of pods") }) }).optional(),
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

  const pods = raw.localFleet?.pods ?? [];
  const podNames = new Map<string, number>();
  const podPorts = new Map<number, number>();
  pods.forEach((pod, k) => {
    const path = `localFleet.pods[${k}]`;
    if (podNames.has(pod.name)) issues.push(`${path}.name: duplicate pod name "${pod.name}" (also pods[${podNames.get(pod.name)}])`);
    else podNames.set(pod.name, k);
    // Local pods all listen on 127.0.0.1, so ports must differ.
    if (podPorts.has(pod.port)) issues.push(`${path}.port: port ${pod.port} is already used by pods[${podPorts.get(pod.port)}]`);
    else podPorts.set(pod.port, k);
    const i = poolIndex.get(pod.pool);
    if (i === undefined) {
      issues.push(`${path}.pool: unknown pool "${pod.pool}" (pools: ${[...poolIndex.keys()].join(", ")})`);
      return;
    }
    // A pod the gateway never routes to is almost certainly a typo.
    if (!raw.pools[i].endpoints.some((ep) => parseEndpoint(ep)?.port === pod.port)) {
      issues.push(`${path}.port: no endpoint of pool "${pod.pool}" (pools[${i}].endpoints) uses port ${pod.port}`);
    }
  });

  const agg = raw.aggregator;
  if (raw.gateway.staleView.maxAgeMs <= agg.heartbeatMs) {
    issues.push(`gateway.staleView.maxAgeMs: must be greater than aggregator.heartbeatMs (${agg.heartbeatMs}), or a quiet but healthy aggregator looks lost between heartbeats`);
  }
  if (agg.staleAfterMs <= agg.scrapeIntervalMs) {
    issues.push(`aggregator.staleAfterMs: must be greater than scrapeIntervalMs (${agg.scrapeIntervalMs}), or every endpoint flaps between fresh and stale`);
  }
  return issues;
}

/** Parses and validates config text; `sourceName` prefixes error messages. */
export function parseGatewayConfig(text: string, sourceName = "<config>"): GatewayConfig {
  const result = validateYaml(configSchema, text, crossCheck);
  if ("issues" in result) throw new ConfigError(sourceName, result.issues);
  const raw = result.data;

  const engineOf = new Map(raw.pools.map((p) => [p.name, p.engine]));
  const config: GatewayConfig = {
    apiVersion: raw.apiVersion,
    kind: raw.kind,
    gateway: raw.gateway,
    aggregator: raw.aggregator,
    pools: raw.pools,
  };
  if (raw.localFleet) {
    config.localFleet = {
      pods: raw.localFleet.pods.map((pod) => ({ ...pod, engine: pod.engine ?? engineOf.get(pod.pool)! })),
    };
  }
  return config;
}

export function loadGatewayConfig(path: string): GatewayConfig {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    throw new ConfigError(path, [`cannot read file: ${(err as Error).message}`]);
  }
  const config = parseGatewayConfig(text, path);
  const jwt = config.gateway.jwt;
  if (jwt) jwt.jwksFile = resolve(dirname(path), jwt.jwksFile);
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
