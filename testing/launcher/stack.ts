// Starts the whole local gateway: the fake fleet (when given one), the
// metrics aggregator, and Envoy with our filter.
// Used by `npm start`, the end-to-end tests and the live benchmark.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseConfigFile, resolveConfigHosts, type Engine, type GatewayConfig } from "../../host/config.js";
import { watchConfigFile, type ConfigWatch } from "../../host/aggregator/config-watch.js";
import { startAggregator, type Aggregator } from "../../host/aggregator/index.js";
import { envoyParamsFromGatewayConfig, envoySdsFiles, renderEnvoyXds } from "../../host/envoy/index.js";
import { startEnvoy, type EnvoyProcess } from "./envoy-process.js";
import { stringify } from "yaml";
import { parseGatewayConfig } from "../../host/config.js";
import { startLocalPods } from "./local-pods.js";
import { startFleet, type Fleet, type LocalPod, type PodSpec } from "../fakeserver/index.js";
import { filterWasmPath } from "../../host/paths.js";
import { checkPortsFree, explainBindError, type PortClaim } from "../../host/ports.js";

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
  /** Everything Envoy prints is appended to this file. */
  envoyLogFile?: string;
  /** Called with every line Envoy prints. */
  onEnvoyLog?: (line: string) => void;
  log?: (line: string) => void;
  /**
   * The file the config came from: its edits are applied to the running
   * gateway (host/aggregator/reload.ts), or refused with the fields named.
   */
  configPath?: string;
  /** How often the watched file is read again (config-watch.ts); default 2 s. */
  configPollMs?: number;
  /** Fake pods to start first, for the config's pools (testing/fakeserver/local-fleet.ts). */
  fleet?: readonly LocalPod[];
}

export interface Stack {
  /** The config as started: gateway.host and aggregator.host resolved to IPs. */
  readonly config: GatewayConfig;
  /** e.g. http://127.0.0.1:8080 */
  readonly gatewayUrl: string;
  readonly envoy: EnvoyProcess;
  readonly aggregator: Aggregator;
  /** The fake pods, when the options asked for them. */
  readonly fleet: Fleet | null;
  close(): Promise<void>;
}

// Envoy's admin listener is on 127.0.0.1 in envoy/gateway.yaml, and the fake
// pods always listen on loopback (testing/fakeserver).
const LOOPBACK = "127.0.0.1";

/** Every port the stack will listen on, named by its config field. */
function portClaims(config: GatewayConfig, opts: StackOptions): { gateway: PortClaim[]; aggregator: PortClaim[]; fleet: PortClaim[] } {
  const { gateway, aggregator } = config;
  const metricsPort = opts.metricsPort ?? aggregator.metricsPort;
  return {
    gateway: [
      { part: "gateway.port", host: gateway.host, port: opts.gatewayPort ?? gateway.port },
      { part: "gateway.adminPort", host: LOOPBACK, port: opts.adminPort ?? gateway.adminPort },
      ...(gateway.statsPort === undefined ? [] : [{ part: "gateway.statsPort", host: gateway.host, port: gateway.statsPort }]),
    ],
    aggregator: [
      { part: "aggregator.port", host: aggregator.host, port: opts.aggregatorPort ?? aggregator.port },
      // 0 means "off" in the file and "any port" as an option; neither is checked.
      ...(metricsPort === false ? [] : [{ part: "aggregator.metricsPort", host: aggregator.host, port: metricsPort }]),
    ],
    fleet: (opts.fleet ?? []).map((pod, k) => ({ part: `fleet pods[${k}].port`, host: LOOPBACK, port: pod.port })),
  };
}

/** A bind can still lose a race after the check: say which port it was. */
const naming = (claims: PortClaim[]) => (err: unknown): never => {
  throw explainBindError(err, claims);
};

export async function startStack(input: GatewayConfig, opts: StackOptions = {}): Promise<Stack> {
  const log = opts.log ?? (() => {});
  const config = await resolveConfigHosts(input);
  const claims = portClaims(config, opts);
  // Before anything starts: a port taken by another gateway must not end in
  // two half-started stacks.
  await checkPortsFree([...claims.gateway, ...claims.aggregator, ...claims.fleet]);
  // Stop whatever already started if a later part fails.
  const started: Array<() => Promise<void>> = [];
  const closeAll = async () => {
    for (const stop of started.reverse()) await stop().catch(() => {});
    started.length = 0;
  };
  try {
    const local = await startLocalPods(opts.fleet ?? [], config, log).catch(naming(claims.fleet));
    started.push(() => local.close());
    const fleet = local.fleet;

    const aggregator = await startAggregator(config, {
      port: opts.aggregatorPort,
      metricsPort: opts.metricsPort,
      log: (line) => log(`[aggregator] ${line}`),
    }).catch(naming(claims.aggregator));
    started.push(() => aggregator.close());

    // The aggregator serves the pools' clusters and the route table; the
    // bootstrap holds what only a restart changes.
    const sdsDir = mkdtempSync(join(tmpdir(), "llm-gateway-sds-"));
    started.push(async () => rmSync(sdsDir, { recursive: true, force: true }));
    const params = envoyParamsFromGatewayConfig(config, { wasmPath: opts.wasmPath ?? filterWasmPath, sdsDir });
    for (const f of envoySdsFiles(params)) writeFileSync(f.path, f.content);
    const envoy = await startEnvoy({
      configYaml: renderEnvoyXds({
        ...params,
        gatewayPort: opts.gatewayPort ?? params.gatewayPort,
        adminPort: opts.adminPort ?? params.adminPort,
        aggregatorPort: aggregator.grpcPort,
        wasmFilter: opts.wasmFilter,
      }).bootstrap,
      concurrency: opts.concurrency ?? 2,
      logLevel: opts.envoyLogLevel,
      logFile: opts.envoyLogFile,
      onLog: opts.onEnvoyLog,
    }).catch(naming(claims.gateway));
    started.push(() => envoy.stop());

    const configPath = opts.configPath;
    if (configPath !== undefined) {
      const watcher: ConfigWatch = await watchConfigFile({
        path: configPath,
        // As at start, so the two compare field by field.
        load: async (text, path) => resolveConfigHosts(parseConfigFile(text, path), path),
        apply: (next) => aggregator.reload(next),
        refuse: (reason) => aggregator.refuseReload(reason),
        log: (line) => log(`[aggregator] ${line}`),
        pollMs: opts.configPollMs,
      });
      started.push(async () => watcher.close());
    }

    return {
      config,
      gatewayUrl: `${config.gateway.tls ? "https" : "http"}://${envoy.listenerAddresses.llm_gateway}`,
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

/**
 * The batch the pool's fake pods run (their engines' maxNumSeqs), as an
 * operator states it in pools[].batchSlots; absent when they differ or
 * keep the engine's default (the config's default for the engine applies).
 */
export function fleetBatchSlots(pool: FleetPool): { batchSlots?: number } {
  const sizes = new Set(pool.pods.map((pod) => pod.engineConfig?.maxNumSeqs));
  const [size] = sizes;
  return sizes.size === 1 && size !== undefined ? { batchSlots: size } : {};
}

/** A pool of fake pods for startFleetStack. */
export interface FleetPool {
  name: string;
  baseModel: string;
  /** The pool's engine, and its pods' metrics dialect (default vllm). */
  engine?: Engine;
  adapters?: string[];
  /** Merged over the config's defaults. */
  weights?: Partial<GatewayConfig["pools"][number]["weights"]>;
  pods: Array<Omit<PodSpec, "model" | "adapters" | "metricsFormat">>;
  /** Addresses that are no fake pod (e.g. a closed port). */
  extraEndpoints?: string[];
  /** Every pod's stated speed (pools[].endpoints[].capacity) instead of the one the aggregator learns. */
  statedCapacity?: number;
}

export interface FleetStack extends Stack {
  fleet: Fleet;
}

/**
 * Fake pods on free loopback ports, then a whole stack in front of them with
 * every port 0 (tests, the fuzzer, benches). `gateway` is merged into the
 * config's gateway block (maxBodyBytes, staleView, jwt...), `aggregator` into
 * its aggregator block (e.g. scrapeIntervalMs).
 */
export async function startFleetStack(
  pools: FleetPool[],
  gateway: Record<string, unknown> = {},
  options: StackOptions = {},
  aggregator: Record<string, unknown> = {},
): Promise<FleetStack> {
  const fleet = await startFleet(
    pools.flatMap((p) =>
      p.pods.map((pod) => ({ ...pod, model: p.baseModel, adapters: p.adapters ?? [], metricsFormat: p.engine ?? "vllm" })),
    ),
  );
  try {
    const config = parseGatewayConfig(
      stringify({
        gateway: { host: "127.0.0.1", port: 0, adminPort: 0, ...gateway },
        aggregator: { host: "127.0.0.1", port: 0, metricsPort: 0, scrapeIntervalMs: 50, staleAfterMs: 1000, ...aggregator },
        // These stacks test routing, failure handling and parsing with bursts
        // of test traffic on a few small fake pods, which admission would
        // partly refuse; tests of admission build their own config
        // (test/helpers/traffic.ts).
        profiles: { latency: { admission: { enabled: false } } },
        pools: pools.map((p) => ({
          name: p.name,
          baseModel: p.baseModel,
          engine: p.engine ?? "vllm",
          adapters: p.adapters ?? [],
          weights: p.weights ?? {},
          ...fleetBatchSlots(p),
          endpoints: [...p.pods.map((pod) => fleet.pod(pod.name).address), ...(p.extraEndpoints ?? [])],
        })),
      }),
      "fleet stack",
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
