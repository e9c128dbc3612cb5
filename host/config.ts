// The declarative gateway config (one YAML resource, kind InferenceGatewayConfig).
// Parsed with `yaml`, validated with zod; every error names the offending field
// path, e.g. `pools[1].weights.queue: expected a number >= 0`. The shape is in
// config/types.ts, the schema in config/schema.ts, the built-in profiles in
// config/profiles.ts; this file checks a document as a whole and resolves it.
import { lookup } from "node:dns/promises";
import { readFileSync } from "node:fs";
import { isIP } from "node:net";
import { dirname, resolve } from "node:path";
import type * as z from "zod";
import { checkEdge, resolveEdgePaths } from "./config/edge.js";
import { controlPlaneIssues, resolveControlPlanePaths } from "./config/control-plane.js";
import { leaderElectionIssues } from "./config/leader-election.js";
import { NAME_TEXT, PLAIN_NAME } from "./config/fields.js";
import { BUILTIN_PROFILES } from "./config/profiles.js";
import { configSchema } from "./config/schema.js";
import { ConfigError, type GatewayConfig, type ModelConfig, type PoolConfig, type ProfileConfig, type ScorerWeights } from "./config/types.js";
import { validateYaml } from "./validation.js";

export * from "./config/types.js";
export type { AccessLogConfig, TracingConfig } from "./config/telemetry.js";
export type { JwtConfig } from "./config/jwt.js";
export { formatHostPort, parseEndpoint } from "./config/fields.js";
export { BUILTIN_PROFILES, DEFAULT_BATCH_SLOTS, DEFAULT_WEIGHTS } from "./config/profiles.js";
export { configSchema } from "./config/schema.js";

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
