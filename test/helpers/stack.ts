// Starts a real stack for end-to-end tests: fake pods on free loopback ports,
// the aggregator, and Envoy loading build/filter.wasm; every port is 0.
import { stringify } from "yaml";
import { parseGatewayConfig, type GatewayConfig } from "../../host/config.js";
import { startFleet, type Fleet, type PodSpec } from "../../host/fakeserver/index.js";
import net from "node:net";
import { startStack, type Stack, type StackOptions } from "../../host/stack.js";

export interface TestPool {
  name: string;
  baseModel: string;
  adapters?: string[];
  weights?: Partial<GatewayConfig["pools"][number]["weights"]>;
  pods: Array<Omit<PodSpec, "model" | "adapters">>;
  /** Addresses that are no fake pod (e.g. a closed port). */
  extraEndpoints?: string[];
}

export interface TestStack extends Stack {
  fleet: Fleet;
}

/** `gateway` is merged into the config's gateway block (maxBodyBytes, jwt...). */
export async function startTestStack(pools: TestPool[], gateway: Record<string, unknown> = {}, options: StackOptions = {}): Promise<TestStack> {
  const fleet = await startFleet(
    pools.flatMap((p) => p.pods.map((pod) => ({ ...pod, model: p.baseModel, adapters: p.adapters ?? [] }))),
  );
  try {
    const config = parseGatewayConfig(
      stringify({
        gateway: { host: "127.0.0.1", port: 0, adminPort: 0, ...gateway },
        aggregator: { host: "127.0.0.1", port: 0, metricsPort: 0, scrapeIntervalMs: 50, staleAfterMs: 1000 },
        pools: pools.map((p) => ({
          name: p.name,
          baseModel: p.baseModel,
          adapters: p.adapters ?? [],
          weights: { queue: 2, kvCache: 2, running: 1, ...p.weights },
          endpoints: [...p.pods.map((pod) => fleet.pod(pod.name).address), ...(p.extraEndpoints ?? [])],
        })),
      }),
      "test stack",
    );
    const stack = await startStack(config, { metricsPort: false, concurrency: 2, ...options });
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

/** Polls `check` until it returns true, failing after `timeoutMs`. */
export async function waitFor(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
}

/**
 * A free port below Linux's ephemeral range (32768+), for a server that must
 * come back on the same port: a port-0 bind elsewhere cannot take it meanwhile.
 */
export async function stablePort(): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const port = 20_000 + Math.floor(Math.random() * 10_000);
    const free = await new Promise<boolean>((resolve) => {
      const probe = net.createServer();
      probe.once("error", () => resolve(false));
      probe.listen(port, "127.0.0.1", () => probe.close(() => resolve(true)));
    });
    if (free) return port;
  }
  throw new Error("no free port in 20000-29999");
}
