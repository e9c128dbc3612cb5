// A gateway in front of real llama.cpp servers, for the real-engine suites:
// the servers, the aggregator reading their metrics as `engine: llamacpp`,
// and a real Envoy with the filter. Skips (or fails in CI) when
// scripts/llamacpp/build-llama-server.sh has not run.
import { stringify } from "yaml";
import { parseGatewayConfig } from "../../host/config.js";
import { startStack, type Stack } from "../../testing/launcher/stack.js";
import { llamacppMissing } from "../../testing/llamacpp/paths.js";
import { startLlamaFleet, type LlamaServer, type LlamaServerOptions } from "../../testing/llamacpp/server.js";
import { skipWithout } from "./requirements.js";

export const MODEL = "tiny-llama";

/** True when the suite must skip (llama-server not built, outside CI). */
export const skipWithoutLlamacpp = (suite: string): boolean => {
  const missing = llamacppMissing();
  return skipWithout(missing === null, suite, missing ?? "");
};

export interface LlamaStack {
  stack: Stack;
  pods: LlamaServer[];
  close(): Promise<void>;
}

/** `count` real pods of `slots` slots each, then the gateway; `gateway` is merged into the config's gateway block. */
export async function startLlamaStack(
  count: number,
  opts: { slots?: number; pod?: Partial<LlamaServerOptions>; gateway?: Record<string, unknown>; profile?: Record<string, unknown> } = {},
): Promise<LlamaStack> {
  const slots = opts.slots ?? 2;
  const fleet = await startLlamaFleet(Array.from({ length: count }, (_, i) => ({ name: `llama-${i}`, alias: MODEL, slots, ...opts.pod })));
  try {
    const config = parseGatewayConfig(
      stringify({
        gateway: { host: "127.0.0.1", port: 0, adminPort: 0, ...opts.gateway },
        // Stale only after 3 s: a loaded CI machine can delay a scrape past 1 s, and a pod left out then loses its cached prefix.
        aggregator: { host: "127.0.0.1", port: 0, metricsPort: 0, scrapeIntervalMs: 100, staleAfterMs: 3000 },
        profiles: { latency: { ...opts.profile } },
        pools: [{ name: "llama", baseModel: MODEL, engine: "llamacpp", batchSlots: slots, endpoints: fleet.pods.map((p) => p.address) }],
      }),
      "llama.cpp stack",
    );
    const stack = await startStack(config, { metricsPort: false, concurrency: 2 });
    return {
      stack,
      pods: fleet.pods,
      close: async () => {
        await stack.close();
        await fleet.stop();
      },
    };
  } catch (err) {
    await fleet.stop();
    throw err;
  }
}

/** Requests Envoy has sent to each upstream host ("ip:port"), from its admin /clusters. */
export async function upstreamRequests(stack: Stack): Promise<Map<string, number>> {
  const text = await (await fetch(`${stack.envoy.adminUrl}/clusters`)).text();
  const out = new Map<string, number>();
  for (const m of text.matchAll(/::(\d+\.\d+\.\d+\.\d+:\d+)::rq_total::(\d+)/g)) out.set(m[1], (out.get(m[1]) ?? 0) + Number(m[2]));
  return out;
}
