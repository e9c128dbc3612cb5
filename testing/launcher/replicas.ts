// Several gateway Envoys and several aggregators on one machine, as a
// production deployment runs them on several: `npm start -- --envoys R
// --aggregators N [--front PORT]`, the live-replicas test and the live
// bench's --envoys. Each Envoy gets its own listener and admin port (the
// config's ports plus its index); the aggregators are separate processes on
// the ports their config's aggregator.leaderElection.peers names, so one can
// be killed while the others run; the optional front is a round-robin Envoy
// in front of the replicas (front.ts).
import { mkdtempSync, rmSync, writeFileSync, type WriteStream } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ConfigError, parseEndpoint, type GatewayConfig } from "../../host/config.js";
import { envoyParamsFromGatewayConfig, envoySdsFiles, renderEnvoyXds } from "../../host/envoy/index.js";
import { filterWasmPath, projectRoot } from "../../host/paths.js";
import { checkPortsFree, type PortClaim } from "../../host/ports.js";
import { startLocalPods } from "./local-pods.js";
import { type Fleet, type LocalPod } from "../fakeserver/index.js";
import { startEnvoy, type EnvoyProcess } from "./envoy-process.js";
import { startFront, type Front } from "./front.js";
import { openLog, startNodeChild, type NodeChild } from "./node-child.js";

const AGGREGATOR_MAIN = join(projectRoot, "dist", "host", "aggregator", "main.js");
const LOOPBACK = "127.0.0.1";

/** A port plus an index, keeping 0 ("any") as it is. */
const nth = (port: number, k: number) => (port === 0 ? 0 : port + k);

export interface AggregatorProcess {
  /** Its place in aggregator.leaderElection.peers. */
  readonly index: number;
  /** host:port, as the peers list names it. */
  readonly grpcAddress: string;
  /** null when aggregator.metricsPort is 0 (off). */
  readonly metricsPort: number | null;
  readonly process: NodeChild;
}

/**
 * The aggregators `count` processes run: the config's peers, which must
 * list exactly that many, each on this machine's loopback or aggregator.host.
 */
export function aggregatorPeers(config: GatewayConfig, count: number): string[] {
  const peers = config.aggregator.leaderElection?.peers;
  if (count === 1 && !peers) return [`${config.aggregator.host}:${config.aggregator.port}`];
  if (!peers) throw new ConfigError("--aggregators", [`aggregator.leaderElection.peers: ${count} aggregators need the config to list them (e.g. config/local-replicas.yaml)`]);
  if (peers.length !== count) throw new ConfigError("--aggregators", [`aggregator.leaderElection.peers lists ${peers.length} aggregators, --aggregators asks for ${count}`]);
  for (const peer of peers) {
    const hp = parseEndpoint(peer);
    if (!hp || (hp.host !== LOOPBACK && hp.host !== config.aggregator.host)) {
      throw new ConfigError("--aggregators", [`aggregator.leaderElection.peers: ${peer} is not on this machine (${config.aggregator.host} or ${LOOPBACK})`]);
    }
  }
  return peers;
}

/**
 * One `node dist/host/aggregator/main.js` per peer, in the peers' order (the
 * first leads), each following the same config file. Resolves once all listen.
 */
export async function startAggregatorProcesses(
  configPath: string,
  config: GatewayConfig,
  count: number,
  opts: { logFile?: string; log?: WriteStream; onLine?: (index: number, line: string) => void } = {},
): Promise<AggregatorProcess[]> {
  const peers = aggregatorPeers(config, count);
  // A stream the caller opened stays the caller's to end.
  const log = opts.log ?? (opts.logFile ? openLog(opts.logFile) : undefined);
  const started: AggregatorProcess[] = [];
  try {
    for (const [index, grpcAddress] of peers.entries()) {
      const port = parseEndpoint(grpcAddress)!.port;
      const metricsPort = config.aggregator.metricsPort === 0 ? null : config.aggregator.metricsPort + index;
      const args = [AGGREGATOR_MAIN, "--config", configPath, "--port", String(port), "--advertise", grpcAddress];
      if (metricsPort !== null) args.push("--metrics-port", String(metricsPort));
      const process = await startNodeChild({
        args,
        name: `aggregator ${index}`,
        ready: /^aggregator listening /,
        log,
        onLine: (line) => opts.onLine?.(index, line),
      });
      started.push({ index, grpcAddress, metricsPort, process });
    }
    return started;
  } catch (err) {
    await Promise.all(started.map((a) => a.process.stop()));
    if (!opts.log) log?.end();
    throw err;
  }
}

export interface EnvoyReplicaOptions {
  count: number;
  /** Replica k listens on gatewayPort + k (0: any port); default gateway.port. */
  gatewayPort?: number;
  /** Replica k's admin is on adminPort + k; default gateway.adminPort. */
  adminPort?: number;
  /** A lone aggregator's gRPC port when it differs from aggregator.port (in-process, port 0). */
  aggregatorPort?: number;
  concurrency?: number;
  logLevel?: string;
  /** Replica k appends its log to logFile(k). */
  logFile?: (k: number) => string;
  onLog?: (k: number, line: string) => void;
}

export interface EnvoyReplicas {
  readonly envoys: EnvoyProcess[];
  /** The replicas' listeners, host:port. */
  readonly addresses: string[];
  close(): Promise<void>;
}

/** Every port the replicas will listen on, named by the field they come from. */
export function replicaPortClaims(config: GatewayConfig, opts: EnvoyReplicaOptions): PortClaim[] {
  const gatewayPort = opts.gatewayPort ?? config.gateway.port;
  const adminPort = opts.adminPort ?? config.gateway.adminPort;
  return Array.from({ length: opts.count }, (_, k) => [
    { part: `gateway.port + ${k} (Envoy ${k})`, host: config.gateway.host, port: nth(gatewayPort, k) },
    { part: `gateway.adminPort + ${k} (Envoy ${k})`, host: LOOPBACK, port: nth(adminPort, k) },
    ...(config.gateway.statsPort === undefined ? [] : [{ part: `gateway.statsPort + ${k} (Envoy ${k})`, host: config.gateway.host, port: config.gateway.statsPort + k }]),
  ]).flat();
}

/** `count` Envoys with the filter, rendered from the same config, each on its own ports. */
export async function startEnvoyReplicas(config: GatewayConfig, opts: EnvoyReplicaOptions): Promise<EnvoyReplicas> {
  const sdsDir = mkdtempSync(join(tmpdir(), "llm-gateway-sds-"));
  const envoys: EnvoyProcess[] = [];
  const close = async () => {
    await Promise.all(envoys.map((e) => e.stop()));
    rmSync(sdsDir, { recursive: true, force: true });
  };
  try {
    const params = envoyParamsFromGatewayConfig(config, { wasmPath: filterWasmPath, sdsDir });
    for (const f of envoySdsFiles(params)) writeFileSync(f.path, f.content);
    const gatewayPort = opts.gatewayPort ?? params.gatewayPort;
    const adminPort = opts.adminPort ?? params.adminPort;
    // One after another: two Envoys starting at once on two busy cores only start slower.
    for (let k = 0; k < opts.count; k++) {
      const bootstrap = renderEnvoyXds({
        ...params,
        gatewayPort: nth(gatewayPort, k),
        adminPort: nth(adminPort, k),
        statsPort: params.statsPort === undefined ? undefined : params.statsPort + k,
        aggregatorPort: opts.aggregatorPort ?? params.aggregatorPort,
      }).bootstrap;
      envoys.push(await startEnvoy({
        configYaml: bootstrap,
        concurrency: opts.concurrency ?? 2,
        logLevel: opts.logLevel,
        logFile: opts.logFile?.(k),
        onLog: opts.onLog && ((line) => opts.onLog!(k, line)),
      }));
    }
    return { envoys, addresses: envoys.map((e) => e.listenerAddresses.llm_gateway), close };
  } catch (err) {
    await close();
    throw err;
  }
}

/** Resolves once the gateway at `url` answers /health with 200 (its filter holds a snapshot), or rejects after `timeoutMs`. */
export async function waitHealthy(url: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const status = await fetch(`${url}/health`).then((r) => r.status, () => 0);
    if (status === 200) return;
    if (Date.now() > deadline) throw new Error(`${url}/health did not answer 200 within ${timeoutMs} ms (last: ${status || "no answer"})`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export interface ReplicaStackOptions {
  /** The config file every aggregator process follows (hot reload included). */
  configPath: string;
  envoys: number;
  aggregators: number;
  /** A round-robin front on this port (0: any); absent, no front. */
  frontPort?: number;
  /** How often the front checks each replica's /health; default 1000 ms. */
  frontHealthCheckMs?: number;
  /** Replica k listens on gatewayPort + k; default gateway.port. */
  gatewayPort?: number;
  fleet?: readonly LocalPod[];
  concurrency?: number;
  envoyLogLevel?: string;
  /** Each part's log lands here: envoy-K.log, front.log, aggregators.log. */
  logDir?: string;
  onEnvoyLog?: (name: string, line: string) => void;
  onAggregatorLine?: (index: number, line: string) => void;
  log?: (line: string) => void;
}

export interface ReplicaStack {
  readonly config: GatewayConfig;
  /** The front's URL, else the first replica's. */
  readonly gatewayUrl: string;
  readonly envoys: EnvoyProcess[];
  readonly aggregators: AggregatorProcess[];
  readonly front: Front | null;
  readonly fleet: Fleet | null;
  close(): Promise<void>;
}

export async function startReplicaStack(config: GatewayConfig, opts: ReplicaStackOptions): Promise<ReplicaStack> {
  const log = opts.log ?? (() => {});
  if (config.gateway.tls && opts.frontPort !== undefined) {
    throw new ConfigError("--front", ["gateway.tls: the local front speaks plain HTTP to the replicas; run the replicas without TLS, or without --front"]);
  }
  const peers = aggregatorPeers(config, opts.aggregators);
  const fleetClaims = (opts.fleet ?? []).map((pod, k) => ({ part: `fleet pods[${k}].port`, host: LOOPBACK, port: pod.port }));
  await checkPortsFree([
    ...replicaPortClaims(config, { count: opts.envoys, gatewayPort: opts.gatewayPort }),
    ...peers.map((peer, k) => ({ part: `aggregator.leaderElection.peers[${k}]`, ...parseEndpoint(peer)! })),
    ...(config.aggregator.metricsPort === 0 ? [] : peers.map((_, k) => ({ part: `aggregator.metricsPort + ${k}`, host: config.aggregator.host, port: config.aggregator.metricsPort + k }))),
    ...(opts.frontPort ? [{ part: "--front", host: config.gateway.host, port: opts.frontPort }] : []),
    ...fleetClaims,
  ]);
  const started: Array<() => Promise<void>> = [];
  const closeAll = async () => {
    for (const stop of started.reverse()) await stop().catch(() => {});
    started.length = 0;
  };
  const logFile = (name: string) => (opts.logDir ? join(opts.logDir, name) : undefined);
  try {
    const local = await startLocalPods(opts.fleet ?? [], config, log);
    started.push(() => local.close());
    const fleet = local.fleet;
    const aggregators = await startAggregatorProcesses(opts.configPath, config, opts.aggregators, { logFile: logFile("aggregators.log"), onLine: opts.onAggregatorLine });
    started.push(async () => {
      await Promise.all(aggregators.map((a) => a.process.stop()));
    });
    const replicas = await startEnvoyReplicas(config, {
      count: opts.envoys,
      gatewayPort: opts.gatewayPort,
      concurrency: opts.concurrency,
      logLevel: opts.envoyLogLevel,
      logFile: opts.logDir ? (k) => join(opts.logDir!, `envoy-${k}.log`) : undefined,
      onLog: opts.onEnvoyLog && ((k, line) => opts.onEnvoyLog!(`envoy ${k}`, line)),
    });
    started.push(() => replicas.close());
    const scheme = config.gateway.tls ? "https" : "http";
    let front: Front | null = null;
    if (opts.frontPort !== undefined) {
      // The front's first health checks must find every replica routing.
      await Promise.all(replicas.addresses.map((a) => waitHealthy(`http://${a}`)));
      front = await startFront(
        { host: config.gateway.host, port: opts.frontPort, replicas: replicas.addresses, healthCheckMs: opts.frontHealthCheckMs },
        { logFile: logFile("front.log"), onLog: opts.onEnvoyLog && ((line) => opts.onEnvoyLog!("front", line)) },
      );
      const f = front;
      started.push(() => f.envoy.stop());
    }
    return {
      config,
      gatewayUrl: front?.url ?? `${scheme}://${replicas.addresses[0]}`,
      envoys: replicas.envoys,
      aggregators,
      front,
      fleet,
      close: closeAll,
    };
  } catch (err) {
    await closeAll();
    throw err;
  }
}
