// Builders for snapshot messages, for tests and benchmarks.
import type { EndpointMsg, PoolMsg, SnapshotMsg, WeightsMsg } from "../host/proto.js";

export const defaultWeights: WeightsMsg = { queue: 2, kvCache: 2, running: 1, lora: 0, prefix: 0 };

export function endpoint(address: string, load: Partial<EndpointMsg> = {}): EndpointMsg {
  return {
    address,
    waiting: 0,
    running: 0,
    kvCacheUsage: 0,
    fresh: true,
    maxLora: 0,
    runningAdapters: [],
    waitingAdapters: [],
    ...load,
  };
}

export function pool(name: string, baseModel: string, endpoints: EndpointMsg[], weights: Partial<WeightsMsg> = {}): PoolMsg {
  return { name, baseModel, weights: { ...defaultWeights, ...weights }, endpoints };
}

/** One model per pool (its base model), plus the given adapters on pool 0. */
export function snapshot(pools: PoolMsg[], adapters: string[] = [], version = 1): SnapshotMsg {
  return {
    version,
    generatedUnixMs: 0,
    pools,
    models: [
      ...pools.map((p, i) => ({ name: p.baseModel, pool: i, adapter: "" })),
      ...adapters.map((a) => ({ name: a, pool: 0, adapter: a })),
    ],
  };
}
