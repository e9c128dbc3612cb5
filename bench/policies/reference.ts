// The reference Endpoint Picker's default scheduling (Gateway API Inference
// Extension v1.5, reference.md section 3): queue 2, KV cache 2, prefix 3,
// highest total wins, ties at random. It scrapes the pods itself (same
// interval and latency as our aggregator) and runs out of process, which
// adds its decision time to every request. A baseline, not our product.
import { PerPodScrapes } from "../sim/per-pod-scrapes.js";
import { deriveSeed, Rng } from "../../testing/fixtures/rng.js";
import { PrefixIndex, prefixHashes } from "./prefix-index.js";
import type { PolicySpec } from "./types.js";

const WEIGHTS = { queue: 2, kvCache: 2, prefix: 3 };
const clamp01 = (x: number) => (x < 0 ? 0 : x > 1 ? 1 : x);

export const reference: PolicySpec = {
  name: "reference",
  description: "the reference Endpoint Picker's defaults: queue 2, KV cache 2, prefix 3 (own scrapes, ext_proc decision time)",
  create({ scenario, fleet, queue, seed }) {
    const view = new PerPodScrapes(fleet, queue, scenario.gateway, new Rng(deriveSeed(seed, "phases:reference")));
    const index = new PrefixIndex(fleet.pods.map((p) => p.engine.config.numGpuBlocks));
    const rng = new Rng(deriveSeed(seed, "reference"));
    return {
      decisionDelayMs: scenario.gateway.referenceDecisionMs,
      route(req) {
        const pods = fleet.pools[req.request.pool];
        const hashes = prefixHashes(req.prompt, req.request.model);
        const matched = index.match(hashes, pods);

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
          const score = WEIGHTS.queue * queueScore + WEIGHTS.kvCache * kvScore + WEIGHTS.prefix * prefixScore;
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
