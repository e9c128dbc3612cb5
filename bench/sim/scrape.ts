/**
 * What one scrape of a simulated pod yields: the engine's gauges as the
 * aggregator's normaliser reads them from vLLM's /metrics
 * (host/aggregator/normalise.ts). Rendering and parsing the text for every
 * scrape would triple the simulator's run time for the same numbers, so the
 * mapping is direct; test/tools/bench-sim.test.ts checks it against the real text
 * path (fake server renderer, aggregator parser and normaliser).
 */
import type { EndpointMetrics } from "../../host/aggregator/normalise.js";
import { vllmAdapterLists } from "../../testing/fakeserver/metrics.js";
import type { SimPod } from "./fleet.js";

const sortedUnique = (names: readonly string[]) => [...new Set(names)].sort();

export function scrapePod(pod: SimPod): EndpointMetrics {
  const m = pod.engine.metrics();
  // vLLM exports lora_requests_info only when serving with LoRA enabled.
  const lora = pod.loraEnabled && m.maxLoras > 0;
  const lists = vllmAdapterLists(m, "vllm");
  return {
    waiting: m.numWaiting,
    running: m.numRunning,
    kvCacheUsage: Math.min(Math.max(m.kvUsage, 0), 1),
    maxLora: lora ? m.maxLoras : 0,
    runningAdapters: lora ? sortedUnique(lists.running) : [],
    waitingAdapters: lora ? sortedUnique(lists.waiting) : [],
    itl: { sumS: m.itl.sum, count: m.itl.count },
    kvTokens: m.numGpuBlocks * m.blockSize,
    asleep: false,
  };
}
