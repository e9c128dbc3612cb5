// The gateways a live run compares, each in front of the same kind of fleet:
// our stack (aggregator + Envoy with the filter) and plain Envoy with its own
// ROUND_ROBIN or LEAST_REQUEST load balancer.
import { stringify } from "yaml";
import { parseGatewayConfig, type GatewayConfig, type ScorerWeights } from "../../host/config.js";
import { envoyParamsFromGatewayConfig, renderEnvoyConfig } from "../../host/envoy/index.js";
import { startEnvoy } from "../../testing/launcher/envoy-process.js";
import { filterWasmPath } from "../../host/paths.js";
import { startStack } from "../../testing/launcher/stack.js";
import { baselineEnvoyConfig, type EnvoyLbPolicy } from "../baseline-envoy.js";
import type { Scenario } from "../scenario.js";

export interface LivePool {
  name: string;
  adapters: string[];
  endpoints: string[];
  /** Real servers: their engine and slots (LiveFleet.engine). */
  engine?: { engine: string; batchSlots: number };
}

export interface Gateway {
  url: string;
  stop(): Promise<void>;
}

/**
 * The gateway config our stack runs for a scenario: one pool per model.
 * The bench's client states each request's class, Critical included, as the
 * simulated one does: every client may claim it here.
 */
export function liveGatewayConfig(scenario: Scenario, pools: LivePool[], weights: ScorerWeights): GatewayConfig {
  const g = scenario.gateway;
  return parseGatewayConfig(
    stringify({
      traffic: { critical: "any" },
      gateway: { host: "127.0.0.1", port: 0, adminPort: 0 },
      aggregator: { host: "127.0.0.1", port: 0, metricsPort: 0, scrapeIntervalMs: g.scrapeIntervalMs, staleAfterMs: g.staleAfterMs },
      pools: pools.map((p) => ({ name: p.name, baseModel: p.name, adapters: p.adapters, weights, endpoints: p.endpoints, ...p.engine })),
    }),
    `live gateway for ${scenario.name}`,
  );
}

export async function startOurs(config: GatewayConfig, workers: number): Promise<Gateway> {
  const stack = await startStack(config, { metricsPort: false, concurrency: workers });
  return { url: stack.gatewayUrl, stop: () => stack.close() };
}

export async function startBaseline(config: GatewayConfig, workers: number, lbPolicy: EnvoyLbPolicy): Promise<Gateway> {
  // The aggregator port only fills the template; the baseline drops the link that would use it.
  const params = { ...envoyParamsFromGatewayConfig(config, { wasmPath: filterWasmPath }), aggregatorPort: 1 };
  const pools = config.pools.map((p) => ({ name: p.name, endpoints: p.endpoints }));
  const envoy = await startEnvoy({ configYaml: baselineEnvoyConfig(renderEnvoyConfig(params), pools, lbPolicy), concurrency: workers });
  return { url: `http://${envoy.listenerAddresses.llm_gateway}`, stop: () => envoy.stop() };
}
