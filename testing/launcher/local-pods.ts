// The pods a local fleet file asks for: fake pods in one fake fleet, and
// real llama.cpp servers (server: llama-server), each on its own port and
// serving its pool's base model under that name.
import type { GatewayConfig } from "../../host/config.js";
import { localFleetSpecs, startFleet, type Fleet, type LocalPod } from "../fakeserver/index.js";
import { startLlamaFleet } from "../llamacpp/server.js";

export interface LocalPods {
  /** The fake pods, which tests drive; null when there are none. */
  fleet: Fleet | null;
  close(): Promise<void>;
}

export async function startLocalPods(pods: readonly LocalPod[], config: GatewayConfig, log: (line: string) => void): Promise<LocalPods> {
  const specs = localFleetSpecs(pods, config);
  const fleet = specs.length > 0 ? await startFleet(specs) : null;
  for (const p of fleet?.pods ?? []) log(`pod ${p.name} (${p.model}) on ${p.url}`);
  const real = pods.filter((p) => p.server === "llama-server");
  if (real.length === 0) return { fleet, close: async () => await fleet?.close() };
  try {
    const pool = (name: string) => config.pools.find((p) => p.name === name)!;
    const llama = await startLlamaFleet(real.map((p) => ({ name: p.name, port: p.port, alias: pool(p.pool).baseModel, slots: pool(p.pool).batchSlots })));
    for (const p of llama.pods) log(`pod ${p.name} (llama-server, ${pool(real.find((r) => r.name === p.name)!.pool).baseModel}) on ${p.url}`);
    return {
      fleet,
      close: async () => {
        await llama.stop();
        await fleet?.close();
      },
    };
  } catch (err) {
    await fleet?.close();
    throw err;
  }
}
