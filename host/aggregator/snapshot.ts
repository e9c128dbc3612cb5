// Builds the Snapshot message (proto/gateway.proto) from the config and the
// latest per-endpoint state, and tells whether the routing state changed.
// The objects use host/proto.ts's shapes (proto-loader's camelCase field
// names), so they go to the grpc-js encoder as they are.
import type { GatewayConfig } from "../config.js";
import type { EndpointMsg, ModelMsg, PoolMsg, SnapshotMsg } from "../proto.js";
import type { CapacityLearner } from "./capacity.js";
import type { EndpointMetrics } from "./normalise.js";

export type Snapshot = SnapshotMsg;
export type SnapshotBody = Pick<SnapshotMsg, "models" | "pools">;

/** What the aggregator knows about one configured endpoint. */
export interface EndpointState {
  /** Resolved literal ip:port; null until DNS has answered. */
  address: string | null;
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
  state.capacity.observe(metrics.itl);
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
 * `states[p][e]` belongs to `config.pools[p].endpoints[e]`. Endpoints without
 * a resolved address are left out: the filter must only ever see ip:port
 * literals. Stale endpoints keep their last values, with fresh=false. A pool
 * with configured capacities uses them for every endpoint, never a learned
 * one: the two are in different units.
 */
export function buildSnapshotBody(config: GatewayConfig, states: EndpointState[][], now: number): SnapshotBody {
  const models: ModelMsg[] = [];
  const pools: PoolMsg[] = config.pools.map((pool, p) => {
    models.push({ name: pool.baseModel, pool: p, adapter: "" });
    for (const adapter of pool.adapters) models.push({ name: adapter, pool: p, adapter });
    const endpoints: EndpointMsg[] = [];
    for (const [e, state] of states[p].entries()) {
      if (state.address === null) continue;
      const m = state.metrics;
      endpoints.push({
        address: state.address,
        waiting: m?.waiting ?? 0,
        running: m?.running ?? 0,
        kvCacheUsage: quantiseKv(m?.kvCacheUsage ?? 0),
        kvTokens: m?.kvTokens ?? 0,
        fresh: isFresh(state, now, config.aggregator.staleAfterMs),
        maxLora: m?.maxLora ?? 0,
        runningAdapters: m?.runningAdapters ?? [],
        waitingAdapters: m?.waitingAdapters ?? [],
        capacity: pool.capacities?.[e] ?? state.capacity.value,
      });
    }
    const w = pool.weights;
    return {
      name: pool.name,
      baseModel: pool.baseModel,
      weights: { queue: w.queue, kvCache: w.kvCache, running: w.running, lora: w.lora, prefix: w.prefix },
      endpoints,
    };
  });
  return { models, pools };
}

/**
 * A comparable key for everything but version and generatedUnixMs. The body
 * is built in a fixed order (config order, sorted adapter lists), so equal
 * state gives an equal string.
 */
export function snapshotKey(body: SnapshotBody): string {
  return JSON.stringify(body);
}

/** Holds the current snapshot; the version moves only when the body changes. */
export class SnapshotTracker {
  private key: string;
  private snapshot: Snapshot;

  /**
   * `firstVersion` should grow across restarts (the aggregator uses its start
   * time in ms), so a filter that ignores versions it has already seen never
   * takes a restarted aggregator's snapshots for old ones.
   */
  constructor(body: SnapshotBody, firstVersion: number, now: number) {
    this.key = snapshotKey(body);
    this.snapshot = { version: firstVersion, ...body, generatedUnixMs: now };
  }

  get current(): Snapshot {
    return this.snapshot;
  }

  /** Returns the new snapshot if the body changed, else null. */
  update(body: SnapshotBody, now: number): Snapshot | null {
    const key = snapshotKey(body);
    if (key === this.key) return null;
    this.key = key;
    this.snapshot = { version: this.snapshot.version + 1, ...body, generatedUnixMs: now };
    return this.snapshot;
  }
}
