// A real gateway for the Envoy stage: fake pods on free loopback ports, the
// aggregator, and Envoy with build/filter.wasm on two workers.
import { stringify } from "yaml";
import { parseGatewayConfig } from "../host/config.js";
import { startFleet, type Fleet } from "../host/fakeserver/index.js";
import { startStack, type Stack } from "../host/stack.js";
import { ENVOY_POOLS } from "./pools.js";

export interface FuzzStack extends Stack {
  fleet: Fleet;
}

/** ENVOY_POOLS served by fake pods named as their endpoints. */
export async function startFuzzStack(workers: number): Promise<FuzzStack> {
  const pools = ENVOY_POOLS;
  // Fast engines with a short context: a mutated max_tokens cannot make a pod generate for long.
  const fleet = await startFleet(
    pools.flatMap((p) => p.endpoints.map((name) => ({ name, model: p.baseModel, adapters: [...p.adapters], engineConfig: { speed: 100, maxModelLen: 4096 } }))),
  );
  try {
    const config = parseGatewayConfig(
      stringify({
        gateway: { host: "127.0.0.1", port: 0, adminPort: 0 },
        aggregator: { host: "127.0.0.1", port: 0, metricsPort: 0, scrapeIntervalMs: 50, staleAfterMs: 1000 },
        pools: pools.map((p) => ({
          name: p.name,
          baseModel: p.baseModel,
          adapters: p.adapters,
          endpoints: p.endpoints.map((name) => fleet.pod(name).address),
        })),
      }),
      "fuzz stack",
    );
    const stack = await startStack(config, { metricsPort: false, concurrency: workers });
    return {
      ...stack,
      fleet,
      close: async () => {
        await stack.close();
        await fleet.close();
      },
    };
  } catch (err) {
    await fleet.close();
    throw err;
  }
}
