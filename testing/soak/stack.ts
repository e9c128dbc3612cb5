// The real stack the soak drives: each fake pod in its own process, the
// aggregator in its own process reading a config file (so its memory is its
// own), and Envoy with the Wasm filter, its pool clusters fed by the
// aggregator over ADS; started by the launcher (testing/launcher/replicas.ts)
// as `npm start -- --aggregators 1` would.
import { readFileSync, type WriteStream } from "node:fs";
import { join } from "node:path";
import { parseGatewayConfig } from "../../host/config.js";
import type { EnvoyProcess } from "../launcher/envoy-process.js";
import { openLog, type NodeChild } from "../launcher/node-child.js";
import { startAggregatorProcesses, startEnvoyReplicas } from "../launcher/replicas.js";
import { POOLS, type SoakPool } from "./gateway-config.js";
import { Membership } from "./membership.js";
import { PodProcess } from "./pods.js";
import { PortPicker } from "./ports.js";

const ENVOY_CONCURRENCY = 2;
const READY_TIMEOUT_MS = 30_000;

export interface SoakStack {
  readonly gatewayUrl: string;
  readonly envoy: EnvoyProcess;
  readonly aggregator: NodeChild;
  readonly membership: Membership;
  /** Every pod started so far, by name (those that left included, stopped). */
  readonly pods: Map<string, PodProcess>;
  /** Starts a new pod of `pool` on a port never used before; it is not a member yet. */
  newPod(pool: string): Promise<PodProcess>;
  close(): Promise<void>;
}

export async function startSoakStack(outDir: string): Promise<SoakStack> {
  const podLog = openLog(join(outDir, "pods.log"));
  const aggregatorLog = openLog(join(outDir, "aggregator.log"));
  const configPath = join(outDir, "gateway.yaml");
  const ports = new PortPicker();
  const pods = new Map<string, PodProcess>();
  const serial = new Map<string, number>();
  const stops: Array<() => Promise<void>> = [];
  const close = async () => {
    for (const stop of stops.reverse()) await stop().catch(() => {});
    stops.length = 0;
    await Promise.all([...pods.values()].map((p) => p.stop().catch(() => {})));
    await Promise.all([endLog(podLog), endLog(aggregatorLog)]);
  };

  const newPod = async (poolName: string): Promise<PodProcess> => {
    const pool = POOLS.find((p) => p.name === poolName)!;
    const n = serial.get(pool.name) ?? 0;
    serial.set(pool.name, n + 1);
    const pod = podFor(pool, `${pool.name}-${n}`, await ports.next(`pod ${pool.name}-${n}`), outDir, podLog);
    pods.set(pod.name, pod);
    await pod.start();
    return pod;
  };

  try {
    const initial = await Promise.all(POOLS.flatMap((p) => Array.from({ length: p.initialPods }, () => p.name)).map(newPod));
    const aggregatorPort = await ports.next("aggregator.port");
    let envoy: EnvoyProcess | null = null;
    const membership = new Membership({ configPath, aggregatorPort, envoyAdminUrl: () => envoy!.adminUrl });
    membership.writeInitial(new Map(POOLS.map((p) => [p.name, initial.filter((pod) => pod.pool === p.name).map((pod) => pod.address)])));
    const config = parseGatewayConfig(readFileSync(configPath, "utf8"), configPath);
    const [aggregator] = await startAggregatorProcesses(configPath, config, 1, { log: aggregatorLog });
    stops.push(() => aggregator.process.stop());

    // The bootstrap holds only what a restart changes: the aggregator serves the clusters, routes and endpoints.
    const replicas = await startEnvoyReplicas(config, { count: 1, concurrency: ENVOY_CONCURRENCY, logLevel: "info", logFile: () => join(outDir, "envoy.log") });
    stops.push(() => replicas.close());
    envoy = replicas.envoys[0];
    const gatewayUrl = `http://${envoy.listenerAddresses.llm_gateway}`;
    await untilEveryPoolAnswers(gatewayUrl);
    return { gatewayUrl, envoy, aggregator: aggregator.process, membership, pods, newPod, close };
  } catch (err) {
    await close();
    throw err;
  }
}

function podFor(pool: SoakPool, name: string, port: number, dir: string, log: WriteStream): PodProcess {
  return new PodProcess({ name, pool: pool.name, model: pool.baseModel, adapters: pool.adapters, engine: pool.engine, port, dir, log });
}

/** One completion per pool through the gateway: the filter has a snapshot and Envoy the pods. */
async function untilEveryPoolAnswers(gatewayUrl: string): Promise<void> {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (const pool of POOLS) {
    let last = "";
    for (;;) {
      const res = await fetch(`${gatewayUrl}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: pool.baseModel, messages: [{ role: "user", content: "ready?" }], max_tokens: 2 }),
      }).catch((err: Error) => err);
      const answer = res instanceof Error ? res.message : `${res.status} ${await res.text()}`;
      if (!(res instanceof Error) && res.status === 200) break;
      last = answer;
      if (Date.now() > deadline) throw new Error(`pool ${pool.name} did not answer within ${READY_TIMEOUT_MS} ms (last: ${last})`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}

function endLog(log: WriteStream): Promise<void> {
  return new Promise((resolve) => log.end(resolve));
}
