import type { Tokenizer } from "./prompt.js";

/**
 * Engine configuration. Costs are expressed for an H100-class GPU serving an
 * 8B model (speed 1.0) and divided by `speed` at step time, so one profile
 * covers a mixed fleet (e.g. speed 0.35 for an A10G-class pod).
 */
export interface EngineConfig {
  /** Served base model name; also seeds the prefix-cache block hashes. */
  model: string;
  /** Relative GPU speed; step compute time is divided by it. Mutable at run time. */
  speed: number;
  /** Fixed cost of one engine step (scheduling, kernel launches, sampling). */
  stepOverheadMs: number;
  /** Fixed decode cost per running sequence per step (sampling, per-sequence kernel work). */
  decodeMsPerSeq: number;
  /** Decode cost per 1000 context tokens of a running sequence per step (memory-bound KV reads). */
  decodeMsPerKTokens: number;
  /** Prefill cost per uncached prompt token scheduled in a step. */
  prefillMsPerToken: number;
  /**
   * Attention's share of prefill, which grows with the context before the
   * token: per prefilled token, per 1000 tokens ahead of it. A chunk of n
   * tokens starting at position p costs n * (p + n/2) / 1000 of these.
   */
  prefillMsPerKTokens: number;
  /** Token budget of one step; prefill beyond it is chunked over later steps. */
  maxNumBatchedTokens: number;
  /** Maximum number of running sequences. */
  maxNumSeqs: number;
  /** Tokens per KV block. */
  blockSize: number;
  /** KV capacity in blocks. */
  numGpuBlocks: number;
  /** Longest prompt + output accepted (further capped by KV capacity). */
  maxModelLen: number;
  /** LoRA adapter slots on the GPU (vLLM --max-loras). */
  maxLoras: number;
  /** Time to load an adapter into a slot; stalls the step that needs it. Not scaled by speed (I/O bound). */
  loraLoadMs: number;
  /** Characters per token when a prompt is given as text, with the `fixed` tokenizer. */
  charsPerToken: number;
  /** How prompt text becomes tokens (prompt.ts): `fixed` (charsPerToken each) or `words` (word pieces). */
  tokenizer: Tokenizer;
}

/**
 * Defaults follow the published 8B-on-H100 simulator profile (TTFT ~100 ms,
 * ITL ~12 ms, prefill ~250 us/token): a ~360-token prompt on an idle engine
 * takes 10 + 360 * 0.25 = 100 ms to its first token, and a batch of 20
 * decoding sequences steps every 10 + 20 * 0.1 = 12 ms. That 0.1 ms per
 * sequence is split so that decode slows as context grows, as KV reads do:
 * 0.06 ms fixed plus 0.05 ms per 1000 tokens of the sequence's context (an
 * 8B model's fp16 KV is 128 KiB per token: 1000 tokens are ~128 MB, ~0.04 ms
 * at H100 bandwidth). Calibration: a typical chat request (700-token prompt,
 * 180 output) has ~790 tokens of context on average while decoding, so it
 * still costs 0.06 + 0.05 * 0.79 = ~0.1 ms per step and its ITL at batch 20
 * stays ~12 ms; a 16k-token document costs 0.86 ms per step.
 *
 * These defaults are the fake pods' for the tests: text is exactly 4
 * characters a token, prefill cost is linear, the scheduler limits are
 * vLLM's defaults below 70 GB of GPU memory, and KV capacity (8192 blocks =
 * 131k tokens) is a third of a real H100's for 8B, so that KV pressure is
 * reachable. The simulator's pods get the GPU profiles of bench/gpus.ts
 * instead (word-piece tokens, attention in prefill, each GPU's limits and KV).
 */
export const DEFAULT_ENGINE_CONFIG: Omit<EngineConfig, "model"> = {
  speed: 1,
  stepOverheadMs: 10,
  decodeMsPerSeq: 0.06,
  decodeMsPerKTokens: 0.05,
  prefillMsPerToken: 0.25,
  prefillMsPerKTokens: 0,
  maxNumBatchedTokens: 2048,
  maxNumSeqs: 256,
  blockSize: 16,
  numGpuBlocks: 8192,
  maxModelLen: 8192,
  maxLoras: 4,
  loraLoadMs: 200,
  charsPerToken: 4,
  tokenizer: "fixed",
};

export type EngineConfigInput = Partial<EngineConfig> & { model: string };

export function resolveEngineConfig(input: EngineConfigInput): EngineConfig {
  const cfg: EngineConfig = { ...DEFAULT_ENGINE_CONFIG, ...input };
  const positive: (keyof EngineConfig)[] = [
    // stepOverheadMs > 0 guarantees every step advances virtual time.
    "speed", "stepOverheadMs", "maxNumBatchedTokens", "maxNumSeqs", "blockSize", "numGpuBlocks", "maxModelLen", "charsPerToken",
  ];
  for (const key of positive) {
    const v = cfg[key];
    if (typeof v !== "number" || !(v > 0)) throw new RangeError(`engine config ${key} must be > 0, got ${String(v)}`);
  }
  if (cfg.tokenizer !== "fixed" && cfg.tokenizer !== "words") throw new RangeError(`engine config tokenizer must be fixed or words, got ${String(cfg.tokenizer)}`);
  for (const key of ["decodeMsPerSeq", "decodeMsPerKTokens", "prefillMsPerToken", "prefillMsPerKTokens", "maxLoras", "loraLoadMs"] as const) {
    if (!(cfg[key] >= 0)) throw new RangeError(`engine config ${key} must be >= 0, got ${String(cfg[key])}`);
  }
  return cfg;
}
