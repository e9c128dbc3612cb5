// A real gateway for the Envoy stage: ENVOY_POOLS as fake pods (named as
// their endpoints) behind the aggregator and Envoy with build/filter.wasm.
import { startFleetStack, type FleetStack } from "../testing/launcher/stack.js";
import { ENVOY_POOLS } from "./pools.js";

export type FuzzStack = FleetStack;

export function startFuzzStack(workers: number): Promise<FuzzStack> {
  return startFleetStack(
    ENVOY_POOLS.map((p) => ({
      name: p.name,
      baseModel: p.baseModel,
      adapters: [...p.adapters],
      // Fast engines with a short context: a mutated max_tokens cannot make a pod generate for long.
      pods: p.endpoints.map((name) => ({ name, engineConfig: { speed: 100, maxModelLen: 4096 } })),
    })),
    {},
    { concurrency: workers },
  );
}
