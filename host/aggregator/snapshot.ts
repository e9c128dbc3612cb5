// The Snapshot message's parts (proto/gateway.proto): an endpoint's entry
// (endpointMsg, sameEndpoint), a pool's, and the config's models and
// profiles. SnapshotBuilder puts them together, rebuilding only what a
// scrape or the clock changed.
// The objects use host/proto.ts's shapes (proto-loader's camelCase field
// names), so they go to the grpc-js encoder as they are.
import { servedModels, type GatewayConfig, type PoolConfig, type ProfileConfig, type ScorerWeights } from "../config.js";
import { PRIORITY_WIRE, type EndpointMsg, type ModelMsg, type PoolMsg, type ProfileMsg, type SnapshotMsg, type WeightsMsg } from "../proto.js";
import type { CapacityLearner } from "./capacity.js";
import type { EndpointMetrics } from "./normalise.js";

export type Snapshot = SnapshotMsg;
export type SnapshotBody = Pick<SnapshotMsg, "models" | "pools"> & { profiles: ProfileMsg[] };

/** What the aggregator knows about one configured endpoint. */
export interface EndpointState {
  /** A literal ip:port: the filter must only ever see those. */
  address: string;
  /** Last good scrape's values; null before the first one. */
  metrics: EndpointMetrics | null;
  /** Date.now() of the last good scrape; null before the first one. */
  lastGoodMs: number | null;
  /** Learns the pod's service rate from its good scrapes. */
  capacity: CapacityLearner;
}

/** Books a good scrape: its values, its time, and what it tells of the pod's speed. */
export function recordScrape(state: EndpointState, metrics: EndpointMetrics, now: number): void {
  state.metrics = metrics;
  state.lastGoodMs = now;
  state.capacity.observe(metrics.itl, metrics.running);
}

/**
 * lastGoodMs moves only when a scrape normalised cleanly, so a pod whose
 * gauges are NaN, infinite or negative goes stale like one that does not answer.
 */
export function isFresh(state: EndpointState, now: number, staleAfterMs: number): boolean {
  return state.lastGoodMs !== null && now - state.lastGoodMs <= staleAfterMs;
}

// Below 0.1% a KV change cannot change a routing decision; quantising keeps
// a busy pod's jitter from pushing a snapshot on every scrape.
const quantiseKv = (kv: number) => Math.round(kv * 1000) / 1000;

/**
 * One endpoint's entry. Stale endpoints keep their last values, with
 * fresh=false. `capacity` is the configured one when the pool has them,
 * else the learned one: the two are in different units and never mixed.
 * `batchSlots` is its pool's.
 */
export function endpointMsg(address: string, m: EndpointMetrics | null, capacity: number, fresh: boolean, batchSlots: number): EndpointMsg {
  return {
    address,
    waiting: m?.waiting ?? 0,
    running: m?.running ?? 0,
    kvCacheUsage: quantiseKv(m?.kvCacheUsage ?? 0),
    kvTokens: m?.kvTokens ?? 0,
    // A sleeping engine serves nothing: left out like a stale pod.
    fresh: fresh && !(m?.asleep ?? false),
    maxLora: m?.maxLora ?? 0,
    runningAdapters: m?.runningAdapters ?? [],
    waitingAdapters: m?.waitingAdapters ?? [],
    capacity,
    batchSlots,
  };
}

const sameList = (a: readonly string[], b: readonly string[]) => a.length === b.length && a.every((x, i) => x === b[i]);

/** Whether two entries would route alike (every field compared). */
export function sameEndpoint(a: EndpointMsg, b: EndpointMsg): boolean {
  return (
    a.address === b.address &&
    a.waiting === b.waiting &&
    a.running === b.running &&
    a.kvCacheUsage === b.kvCacheUsage &&
    a.kvTokens === b.kvTokens &&
    a.fresh === b.fresh &&
    a.maxLora === b.maxLora &&
    a.capacity === b.capacity &&
    a.batchSlots === b.batchSlots &&
    sameList(a.runningAdapters, b.runningAdapters) &&
    sameList(a.waitingAdapters, b.waitingAdapters)
  );
}

export const poolMsg = (pool: PoolConfig, endpoints: EndpointMsg[]): PoolMsg => ({ name: pool.name, baseModel: pool.baseModel, weights: weightsMsg(pool.weights), endpoints });

// Fixed field order, so equal state gives an equal snapshotKey.
const weightsMsg = (w: ScorerWeights): WeightsMsg => ({ ...w });

/**
 * A model's profile as its pool serves it: a pool that gives `weights`
 * overrides the profile's weights field by field, and the result is a
 * profile of its own, `<profile>@<pool>`, when that changes any of them.
 */
function effectiveProfile(config: GatewayConfig, name: string, pool: PoolConfig): ProfileMsg {
  const base: ProfileConfig = config.profiles[name];
  const weights = { ...base.weights, ...pool.weightOverrides };
  const changed = (Object.keys(weights) as Array<keyof ScorerWeights>).some((k) => weights[k] !== base.weights[k]);
  const a = base.admission;
  const d = base.deadlines;
  return {
    name: changed ? `${name}@${pool.name}` : name,
    weights: weightsMsg(weights),
    admission: {
      enabled: a.enabled,
      maxWaiting: a.maxWaiting,
      maxKvCache: a.maxKvCache,
      sheddableFactor: a.sheddableFactor,
      criticalFactor: a.criticalFactor,
      maxRetryAfterS: a.maxRetryAfterS,
      waitCriticalMs: a.waitCriticalMs,
      waitStandardMs: a.waitStandardMs,
      waitSheddableMs: a.waitSheddableMs,
    },
    // streamIdleMs is Envoy's (the stream routes), not the filter's.
    deadlines: {
      firstByteMs: d.firstByteMs,
      promptMsPerKtoken: d.promptMsPerKToken,
      outputMsPerToken: d.outputMsPerToken,
      assumedOutputTokens: d.assumedOutputTokens,
    },
  };
}

/**
 * Every name a client may ask for: the served ones pool by pool (base model,
 * then adapters), then the virtual ones in `models:` order, whose pool is
 * their first split target's. Each carries its class, its split (as model
 * indexes) and its profile (its own, else its pool's); the profiles in use
 * are sent once each, in order of first use.
 */
export function modelsAndProfiles(config: GatewayConfig): { models: ModelMsg[]; profiles: ProfileMsg[] } {
  const named: Array<Pick<ModelMsg, "name" | "pool" | "adapter">> = [];
  config.pools.forEach((pool, p) => {
    named.push({ name: pool.baseModel, pool: p, adapter: "" });
    for (const adapter of pool.adapters) named.push({ name: adapter, pool: p, adapter });
  });
  const served = servedModels(config.pools);
  for (const m of config.models) {
    if (!served.has(m.name)) named.push({ name: m.name, pool: served.get(m.split![0].model)!, adapter: "" });
  }
  const index = new Map(named.map((m, i) => [m.name, i]));
  const settings = new Map(config.models.map((m) => [m.name, m]));

  const profiles: ProfileMsg[] = [];
  const profileIndex = new Map<string, number>();
  const profileOf = (name: string, pool: PoolConfig): number => {
    const profile = effectiveProfile(config, name, pool);
    let i = profileIndex.get(profile.name);
    if (i === undefined) {
      i = profiles.push(profile) - 1;
      profileIndex.set(profile.name, i);
    }
    return i;
  };

  const models = named.map((m): ModelMsg => {
    const own = settings.get(m.name);
    const pool = config.pools[m.pool];
    return {
      ...m,
      profile: profileOf(own?.profile ?? pool.profile, pool),
      priority: PRIORITY_WIRE[own?.priority ?? "standard"],
      splits: (own?.split ?? []).map((t) => ({ model: index.get(t.model)!, weight: t.weight })),
    };
  });
  return { models, profiles };
}

/** The snapshot after `previous` with a new body: the next version. */
export function nextSnapshot(previous: Snapshot, body: SnapshotBody, now: number): Snapshot {
  return { version: previous.version + 1, ...body, generatedUnixMs: now };
}

/**
 * `firstVersion` should grow across restarts (the aggregator uses its start
 * time in ms), so a filter that ignores versions it has already seen never
 * takes a restarted aggregator's snapshots for old ones.
 */
export function firstSnapshot(body: SnapshotBody, firstVersion: number, now: number): Snapshot {
  return { version: firstVersion, ...body, generatedUnixMs: now };
}
