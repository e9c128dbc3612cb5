// The model names and pools each fuzz stage serves. Bodies are generated from
// these names, so a case depends on (stage, seed, index) only.
import type { SnapshotMsg } from "../host/proto.js";

export type Stage = "native" | "envoy";

export interface PoolSpec {
  name: string;
  baseModel: string;
  adapters: readonly string[];
  /** Endpoint addresses, or for the Envoy stage the fake pods' names. */
  endpoints: readonly string[];
}

/** Names the config schema would refuse (quotes, NUL, tab, non-ASCII) are fine in a snapshot: they test unescaping. */
export const NATIVE_POOLS: readonly PoolSpec[] = [
  { name: "llama", baseModel: "llama-3.1-8b", adapters: ["sql-lora", "org/model:v2", 'quo"te\\back'], endpoints: ["10.0.0.1:8000", "10.0.0.2:8000"] },
  { name: "qwen", baseModel: "qwen3-32b", adapters: ["m\u00f6del-\u65e5\u672c-\u{1f600}", "nul\u0000name", "tab\tname"], endpoints: ["10.0.1.1:8000"] },
];

/** Config names are plain ASCII; "/" and ":" still need percent-encoding in x-fake-parsed-model. */
export const ENVOY_POOLS: readonly PoolSpec[] = [
  { name: "llama", baseModel: "llama-3.1-8b", adapters: ["sql-lora", "org/model:v2"], endpoints: ["llama-a", "llama-b"] },
  { name: "qwen", baseModel: "qwen3-32b", adapters: [], endpoints: ["qwen-a"] },
];

export const STAGE_POOLS: Record<Stage, readonly PoolSpec[]> = { native: NATIVE_POOLS, envoy: ENVOY_POOLS };

/** Every served model name with the endpoints of its pool. */
export function servedModels(pools: readonly PoolSpec[]): Map<string, ReadonlySet<string>> {
  return new Map(pools.flatMap((p) => [p.baseModel, ...p.adapters].map((m) => [m, new Set(p.endpoints)] as const)));
}

export function snapshotOf(pools: readonly PoolSpec[]): SnapshotMsg {
  return {
    version: 1,
    generatedUnixMs: 0,
    pools: pools.map((p) => ({
      name: p.name,
      baseModel: p.baseModel,
      weights: { queue: 2, kvCache: 2, running: 1, lora: 0, prefix: 0 },
      endpoints: p.endpoints.map((address) => ({
        address, waiting: 0, running: 0, kvCacheUsage: 0, fresh: true, maxLora: 0, runningAdapters: [], waitingAdapters: [],
      })),
    })),
    models: pools.flatMap((p, pool) => [p.baseModel, ...p.adapters].map((name) => ({ name, pool, adapter: name === p.baseModel ? "" : name }))),
  };
}
