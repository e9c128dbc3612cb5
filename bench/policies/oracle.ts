// A yardstick, not a product: sees every engine's exact state with no delay
// (what each pod has queued, its prefix cache, its LoRA slots) and sends each
// request where its predicted time to first token is lowest. Greedy: it does
// not plan for requests still to come.
import { blockHashes, countTokens } from "../../testing/engine/index.js";
import type { Outstanding, SimPod } from "../sim/fleet.js";
import { deriveSeed, Rng } from "../../testing/fixtures/rng.js";
import type { PolicySpec } from "./types.js";

interface Candidate {
  promptTokens: number;
  /** Prompt tokens this pod's prefix cache would serve. */
  hitTokens: number;
  adapter: string | undefined;
}

/**
 * Predicted TTFT (ms) on `pod`: the step in flight, then the prefill work
 * queued ahead plus this prompt's uncached part in chunks of
 * maxNumBatchedTokens, each step also decoding the batch; plus waiting for
 * KV blocks, sequence slots or a LoRA slot when the pod has none free.
 */
function predictTtftMs(pod: SimPod, outstanding: Outstanding[], cachedAt: Map<number, number>, c: Candidate, now: number): number {
  const cfg = pod.engine.config;
  let prefillAhead = 0;
  let blocks = Math.ceil(c.promptTokens / cfg.blockSize);
  // Decode reads every sequence's context each step (engine: decodeMsPerKTokens).
  let contextTokens = c.promptTokens;
  // Prefill's attention term (engine: prefillMsPerKTokens), per prefilled token by the context ahead of it.
  const attentionK = (cached: number, total: number) => ((total - cached) * (cached + (total - cached) / 2)) / 1000;
  let prefillContextK = attentionK(c.hitTokens, c.promptTokens);
  for (const o of outstanding) {
    if (o.firstTokenMs === undefined) {
      const cached = cachedAt.get(o.request.index) ?? 0;
      prefillAhead += o.promptTokens - cached;
      prefillContextK += attentionK(cached, o.promptTokens);
    }
    blocks += Math.ceil((o.promptTokens + o.request.maxTokens) / cfg.blockSize);
    contextTokens += o.promptTokens + o.tokensOut;
  }
  const work = prefillAhead + c.promptTokens - c.hitTokens;
  const stepMs =
    cfg.stepOverheadMs + Math.min(outstanding.length + 1, cfg.maxNumSeqs) * cfg.decodeMsPerSeq + (contextTokens / 1000) * cfg.decodeMsPerKTokens;
  const prefillMs = work * cfg.prefillMsPerToken + prefillContextK * cfg.prefillMsPerKTokens;
  const computeMs = (Math.max(1, Math.ceil(work / cfg.maxNumBatchedTokens)) * stepMs + prefillMs) / cfg.speed;
  const busyUntil = pod.engine.nextEventTime(); // Infinity when idle
  const inFlightMs = Number.isFinite(busyUntil) ? Math.max(0, busyUntil - now) : 0;
  const tokenMs = stepMs / cfg.speed;

  // Capacity: requests free blocks and slots as they finish, shortest remaining output first.
  let capacityWait = 0;
  const slotsShort = outstanding.length + 1 - cfg.maxNumSeqs;
  let blocksShort = blocks - cfg.numGpuBlocks;
  if (slotsShort > 0 || blocksShort > 0) {
    const byRemaining = [...outstanding].sort((a, b) => a.request.maxTokens - a.tokensOut - (b.request.maxTokens - b.tokensOut));
    let freedSlots = 0;
    for (const o of byRemaining) {
      freedSlots++;
      blocksShort -= Math.ceil((o.promptTokens + o.request.maxTokens) / cfg.blockSize);
      capacityWait = (o.request.maxTokens - o.tokensOut) * tokenMs;
      if (freedSlots >= slotsShort && blocksShort <= 0) break;
    }
  }

  let loraWait = 0;
  if (c.adapter !== undefined) {
    const m = pod.engine.metrics();
    if (!m.runningAdapters.includes(c.adapter)) {
      if (!m.residentAdapters.includes(c.adapter)) loraWait += cfg.loraLoadMs;
      if (m.runningAdapters.length >= cfg.maxLoras) {
        // Until the first running adapter has no request left.
        let drain = Infinity;
        for (const a of m.runningAdapters) {
          let longest = 0;
          for (const o of outstanding) if (o.request.adapter === a) longest = Math.max(longest, o.request.maxTokens - o.tokensOut);
          drain = Math.min(drain, longest * tokenMs);
        }
        loraWait += drain;
      }
    }
  }
  return inFlightMs + computeMs + Math.max(capacityWait, loraWait);
}

export const oracle: PolicySpec = {
  name: "oracle",
  description: "exact engine state, no delay: lowest predicted TTFT (queued prefill, prefix cache, KV, LoRA slots, speed)",
  create({ fleet, seed }) {
    const rng = new Rng(deriveSeed(seed, "oracle"));
    const cachedAt = new Map<number, number>();
    return {
      decisionDelayMs: 0,
      route(req, now) {
        const r = req.request;
        const pods = fleet.pools[r.pool];
        const first = fleet.pods[pods[0]].engine.config;
        // Every pod of a pool hashes alike unless a scenario gives them different block sizes.
        const hashesFor = new Map<number, number[]>();
        const promptTokens = countTokens(req.prompt, first.charsPerToken, first.tokenizer);
        let best = -1;
        let bestMs = Infinity;
        let bestHit = 0;
        let ties = 0;
        for (const p of pods) {
          const pod = fleet.pods[p];
          const cfg = pod.engine.config;
          let hashes = hashesFor.get(cfg.blockSize);
          if (!hashes) hashesFor.set(cfg.blockSize, (hashes = blockHashes(req.prompt, r.adapter ?? cfg.model, cfg.blockSize, cfg.charsPerToken, cfg.tokenizer)));
          const hitTokens = pod.engine.cachedTokens(hashes, promptTokens);
          const ms = predictTtftMs(pod, [...fleet.outstanding(p)], cachedAt, { promptTokens, hitTokens, adapter: r.adapter }, now);
          if (ms < bestMs - 1e-9) {
            best = p;
            bestMs = ms;
            bestHit = hitTokens;
            ties = 1;
          } else if (ms <= bestMs + 1e-9 && rng.int(++ties) === 0) {
            best = p;
            bestHit = hitTokens;
          }
        }
        cachedAt.set(r.index, bestHit);
        return { pod: best };
      },
    };
  },
};
