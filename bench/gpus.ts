// What the simulator's pods are: an 8B model in fp16 on each GPU class, as
// vLLM V1 serves it through its OpenAI server. A scenario's pod group names
// its GPU (`gpu:`, H100 by default) and its speed; its `engine:` still wins
// field by field.
//
// - Scheduler limits are vLLM V1's defaults for its OpenAI server: 8192
//   batched tokens and 1024 sequences on GPUs of 70 GB or more other than the
//   A100, else 2048 and 256 (vllm/engine/arg_utils.py, get_batch_defaults).
// - KV capacity is what is left of 90% of the GPU's memory after 16 GB of
//   weights, at 128 KiB per token (32 layers x 8 KV heads x 128 x 2 x fp16),
//   in 16-token blocks: 80 GB leaves 56 GB = ~458k tokens = 28,000 blocks;
//   24 GB leaves 5.6 GB = ~46k tokens = 2,800 blocks.
// - Every pod cuts text into word pieces (testing/engine/prompt.ts), and its
//   prefill pays attention: 0.008 ms per token per 1000 tokens ahead, which
//   doubles the per-token cost at 32k tokens of context (attention's FLOPs
//   per token at 32k match the 8B model's ~16 GFLOPs of the rest).
import type { EngineConfigInput } from "../testing/engine/index.js";

export const GPU_NAMES = ["h100", "a100", "l4", "a10g"] as const;
export type GpuName = (typeof GPU_NAMES)[number];

type Profile = Pick<EngineConfigInput, "maxNumBatchedTokens" | "maxNumSeqs" | "numGpuBlocks">;

const BIG = { maxNumBatchedTokens: 8192, maxNumSeqs: 1024 };
const SMALL = { maxNumBatchedTokens: 2048, maxNumSeqs: 256 };

export const GPUS: Record<GpuName, Profile> = {
  h100: { ...BIG, numGpuBlocks: 28_000 },
  a100: { ...SMALL, numGpuBlocks: 28_000 },
  l4: { ...SMALL, numGpuBlocks: 2_800 },
  a10g: { ...SMALL, numGpuBlocks: 2_800 },
};

/** What every simulated pod shares, whatever its GPU. */
export const SIMULATED_ENGINE: Pick<EngineConfigInput, "tokenizer" | "prefillMsPerKTokens"> = {
  tokenizer: "words",
  prefillMsPerKTokens: 0.008,
};
