// Starts the whole local gateway: the fake fleet (when the config has a
// localFleet block), the metrics aggregator, and Envoy with our filter.
// Used by `npm start`, the end-to-end tests and the live benchmark.
import type { GatewayConfig } from "./config.js";
import { startAggregator, type Aggregator } from "./aggregator/index.js";
import { envoyParamsFromGatewayConfig, renderEnvoyConfig, startEnvoy, type EnvoyProcess } from "./envoy/index.js";
import { localFleetSpecs, startFleet, type Fleet } from "./fakeserver/index.js";
import { filterWasmPath } from "./paths.js";

export interface StackOptions {
  /** Override the config's ports; 0 lets the OS pick (tests do that). */
  gatewayPort?: number;
  adminPort?: number;
  aggregatorPort?: number;
  /** false turns the aggregator's own /metrics off. */
  metricsPort?: number | false;
  /** Envoy worker threads. */
  concurrency?: number;
  envoyLogLevel?: string;
  /** false starts Envoy without our Wasm HTTP filter (tests of the route table alone). */
  wasmFilter?: boolean;
  /** The plugin Envoy loads; default build/filter.wasm (tests load variants). */
  wasmPath?: string;
  log?: (line: string) => void;
}

export interface Stack {
  readonly config: GatewayConfig;
  /** e.g. http://127.0.0.1:8080 */
  readonly gatewayUrl: string;
  readonly envoy: EnvoyProcess;
  readonly aggregator: Aggregator;
  /** The fake pods, when the config asked for them. */
  readonly fleet: Fleet | null;
  close(): Promise<void>;
}

export async function startStack(config: GatewayConfig, opts: StackOptions = {}): Promise<Stack> {
  const log = opts.log ?? (() => {});
  // Stop whatever already started if a later part fails.
  const started: Array<() => Promise<void>> = [];
  const closeAll = async () => {
    for (const stop of started.reverse()) await stop().catch(() => {});
    started.length = 0;
  };
  try {
    const specs = localFleetSpecs(config);
    const fleet = specs.length > 0 ? await startFleet(specs) : null;
    if (fleet) {
      started.push(() => fleet.close());
      for (const p of fleet.pods) log(`pod ${p.name} (${p.model}) on ${p.url}`);
    }

    const aggregator = await startAggregator(config, {
      port: opts.aggregatorPort,
      metricsPort: opts.metricsPort,
      log: (line) => log(`[aggregator] ${line}`),
    });
    started.push(() => aggregator.close());

    const params = envoyParamsFromGatewayConfig(config, { wasmPath: opts.wasmPath ?? filterWasmPath });
    const envoy = await startEnvoy({
      configYaml: renderEnvoyConfig({
        ...params,
        gatewayPort: opts.gatewayPort ?? params.gatewayPort,
        adminPort: opts.adminPort ?? params.adminPort,
        aggregatorPort: aggregator.grpcPort,
        wasmFilter: opts.wasmFilter,
      }),
      concurrency: opts.concurrency ?? 2,
      logLevel: opts.envoyLogLevel,
    });
    started.push(() => envoy.stop());

    return {
      config,
      gatewayUrl: `http://${envoy.listenerAddresses.llm_gateway}`,
      envoy,
      aggregator,
      fleet,
      close: closeAll,
    };
  } catch (err) {
    await closeAll();
    throw err;
  }
}
