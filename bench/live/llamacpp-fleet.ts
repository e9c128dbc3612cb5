// The scenario's pods as real llama.cpp servers: one llama-server per pod, a
// random-weight llama whose vocab makes the trace's words single tokens, and
// no host-memory prompt cache, so each pod's cache is its slots' KV (as a
// GPU's KV budget bounds reuse). The scenario's speeds and engine settings
// describe GPUs and do not apply: every pod is the same CPU server.
import { CORPUS_WORDS } from "../sim/workload.js";
import { startLlamaFleet } from "../../testing/llamacpp/server.js";
import type { ModelShape } from "../../testing/llamacpp/model.js";
import type { LiveFleet } from "./fleet-process.js";

/** Width 256, 4 layers: a 1,300-token prompt takes ~0.2 s to prefill on one core, a cached one ~0.02 s. */
export const BENCH_MODEL: ModelShape = { width: 256, layers: 4, ctx: 32768, words: CORPUS_WORDS };
/** Parallel slots per pod: each holds one prompt's KV between requests. */
export const BENCH_SLOTS = 2;

export async function startLlamacppFleet(pods: ReadonlyArray<{ name: string; model: string }>): Promise<LiveFleet> {
  const fleet = await startLlamaFleet(
    pods.map((p) => ({ name: p.name, alias: p.model, slots: BENCH_SLOTS, ctxPerSlot: 8192, model: BENCH_MODEL, cacheRamMiB: 0 })),
  );
  return {
    addresses: new Map(fleet.pods.map((p) => [p.name, p.address])),
    engine: { engine: "llamacpp", batchSlots: BENCH_SLOTS },
    serverCache: async () => {
      const all = await Promise.all(fleet.pods.map((p) => p.metrics()));
      return {
        cachedTokens: all.reduce((s, m) => s + (m["llamacpp:prompt_tokens_cached_total"] ?? 0), 0),
        // llama.cpp's prompt_tokens_total leaves the cached tokens out.
        processedTokens: all.reduce((s, m) => s + (m["llamacpp:prompt_tokens_total"] ?? 0), 0),
      };
    },
    stop: fleet.stop,
  };
}
