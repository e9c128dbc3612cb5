// The reference Endpoint Picker as its chart ships it (Gateway API Inference
// Extension v1.5, reference.md section 3): queue 2, KV cache 2, prefix 3, and
// LoRA affinity 1 where the pool serves adapters; highest total wins, ties at
// random. Its saturation detector first drops the saturated pods
// (max(queue/5, kv/0.8) >= 1, or metrics older than 200 ms), failing open when
// that would drop every pod, and refuses a Sheddable request with 429 (no
// Retry-After) when every pod is saturated. It scrapes the pods itself (same
// interval and latency as our aggregator) and runs out of process, which adds
// its decision time to every request. A baseline, not our product.
import type { EndpointMetrics } from "../../host/aggregator/normalise.js";
import { PerPodScrapes } from "../sim/per-pod-scrapes.js";
import { deriveSeed, Rng } from "../../testing/fixtures/rng.js";
import { PrefixIndex, prefixHashes } from "./prefix-index.js";
import type { PolicySpec } from "./types.js";

const WEIGHTS = { queue: 2, kvCache: 2, prefix: 3, lora: 1 };
/** The saturation detector's thresholds and staleness bound. */
const SATURATION = { queueDepth: 5, kvCache: 0.8, staleMs: 200 };
const clamp01 = (x: number) => (x < 0 ? 0 : x > 1 ? 1 : x);

/** The LoRA affinity score: 1 adapter running, 0.8 a free slot, 0.6 adapter waiting, else 0. */
export function loraAffinity(m: EndpointMetrics, adapter: string): number {
  if (m.runningAdapters.includes(adapter)) return 1;
  if (m.runningAdapters.length + m.waitingAdapters.length < m.maxLora) return 0.8;
  if (m.waitingAdapters.includes(adapter)) return 0.6;
  return 0;
}

export function saturated(m: EndpointMetrics, ageMs: number): boolean {
  return ageMs > SATURATION.staleMs || Math.max(m.waiting / SATURATION.queueDepth, m.kvCacheUsage / SATURATION.kvCache) >= 1;
}

export const reference: PolicySpec = {
  name: "reference",
  description: "the reference Endpoint Picker as shipped: queue 2, KV cache 2, prefix 3, LoRA affinity 1, saturation detector (own scrapes, ext_proc decision time)",
  create({ scenario, fleet, queue, seed }) {
    const view = new PerPodScrapes(fleet, queue, scenario.gateway, new Rng(deriveSeed(seed, "phases:reference")));
    const index = new PrefixIndex(fleet.pods.map((p) => p.engine.config.numGpuBlocks));
    const rng = new Rng(deriveSeed(seed, "reference"));
    const servesAdapters = scenario.models.map((m) => m.adapters !== undefined);
    return {
      decisionDelayMs: scenario.gateway.referenceDecisionMs,
      route(req, now) {
        const pool = fleet.pools[req.request.pool];
        const open = pool.filter((p) => !saturated(view.latest[p], now - view.landedMs[p]));
        if (open.length === 0 && req.request.priority === "sheddable") return { status: 429, message: "the pool is saturated" };
        const pods = open.length > 0 ? open : pool;
        const hashes = prefixHashes(req.prompt, req.request.model);
        const matched = index.match(hashes, pods);
        const adapter = servesAdapters[req.request.pool] ? req.request.adapter : undefined;

        let minQ = Infinity;
        let maxQ = -Infinity;
        for (const p of pods) {
          minQ = Math.min(minQ, view.latest[p].waiting);
          maxQ = Math.max(maxQ, view.latest[p].waiting);
        }
        let best = -1;
        let bestScore = -Infinity;
        let ties = 0;
        pods.forEach((p, c) => {
          const m = view.latest[p];
          const queueScore = maxQ > minQ ? (maxQ - m.waiting) / (maxQ - minQ) : 1;
          const kvScore = clamp01(1 - m.kvCacheUsage);
          const prefixScore = hashes.length > 0 ? matched[c] / hashes.length : 0;
          const loraScore = adapter === undefined ? 0 : loraAffinity(m, adapter);
          const score = WEIGHTS.queue * queueScore + WEIGHTS.kvCache * kvScore + WEIGHTS.prefix * prefixScore + WEIGHTS.lora * loraScore;
          if (score > bestScore + 1e-9) {
            best = p;
            bestScore = score;
            ties = 1;
          } else if (score >= bestScore - 1e-9 && rng.int(++ties) === 0) {
            best = p;
          }
        });
        index.add(best, hashes);
        return { pod: best };
      },
    };
  },
};
