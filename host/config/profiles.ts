// Profiles: the built-in `latency` and `throughput` settings (scorer weights,
// admission, deadlines), why each number is what it is, and the schema of a
// file's overrides.
import * as z from "zod";
import { SCORERS } from "../scorers.generated.js";
import { msg } from "../validation.js";
import { weight } from "./fields.js";
import type { Engine, ProfileConfig, ScorerName, ScorerWeights } from "./types.js";

/** A pool's batchSlots when the file gives none: the engine's own default batch limit. */
export const DEFAULT_BATCH_SLOTS: Readonly<Record<Engine, number>> = {
  // vLLM's max_num_seqs below 70 GB of GPU memory and on A100s; H100-class
  // GPUs default to 1024, so state batchSlots for those.
  vllm: 256,
  // SGLang sizes max_running_requests from KV memory (no fixed default); as vLLM's.
  sglang: 256,
  // TGI leaves max_batch_size unset and its router admits at most
  // max_concurrent_requests (default 128), so no more run at once.
  tgi: 128,
  // llama-server's -np/--parallel: auto (-1) becomes 4 slots (tools/server/server.cpp).
  llamacpp: 4,
  // TensorRT-LLM's max_batch_size default (tensorrt_llm/builder.py BuildConfig, trtllm-serve): 2048.
  trtllm: 2048,
};

/** Each scorer's weight in a built-in profile, as its scorer.json states it (docs/scorers.md says why). */
const builtinWeights = (profile: "latency" | "throughput"): ScorerWeights =>
  Object.fromEntries(SCORERS.map((s) => [s.name, s.defaultWeight[profile]])) as ScorerWeights;

/** The scorers' default weights: the latency profile's. */
export const DEFAULT_WEIGHTS: Readonly<ScorerWeights> = builtinWeights("latency");

/**
 * The two profiles that always exist; a `profiles:` entry of the same name
 * overrides their fields, and a new profile starts from `latency`. The
 * numbers are starting points, retuned on the simulator (BENCHMARKS.md).
 */
export const BUILTIN_PROFILES = {
  /** Chat: a person waits for the first token. */
  latency: {
    weights: DEFAULT_WEIGHTS,
    admission: {
      enabled: true,
      // One request waiting per pod: what waits beyond it waits in the
      // gateway, where its pod is chosen when one has room (late binding),
      // and the one queued on the pod fills its next free batch slot before
      // the gateway's next tick can, so throughput is kept.
      maxWaiting: 1,
      // vLLM preempts running sequences when KV blocks run out; a pod that
      // queues at 95% would recompute work, not gain any.
      maxKvCache: 0.95,
      // Sheddable is refused as soon as every pod queues at all.
      sheddableFactor: 0.5,
      // Critical may queue twice as deep: admitted after Standard is refused
      // (and after a Standard request's retry, whose limit is halfway), its
      // wait still bounded.
      criticalFactor: 2,
      // The OpenAI SDKs honour a Retry-After under 60 s and fall back to
      // their own half-second backoff from 60 s up (openai-node's
      // retryRequest), so 59 is the longest wait they keep.
      maxRetryAfterS: 59,
      // Held in the gateway while no pod has room, at most: a person waiting
      // on a chat answer gives up within tens of seconds, so past these a
      // request is better told when to come back. Critical waits longest
      // (it is what the operator promised); Sheddable rides out a burst and
      // is refused first when the pool stays full.
      waitCriticalMs: 60_000,
      waitStandardMs: 30_000,
      waitSheddableMs: 10_000,
    },
    deadlines: {
      // Queueing and scheduling on a busy pod, well past a healthy one's first token.
      firstByteMs: 20_000,
      // 0.5 ms per prompt token: a slow GPU's prefill of a 70B model, so a 100k-token prompt adds 50 s.
      promptMsPerKToken: 500,
      // 10 tokens/s: a loaded slow pod's decode, with headroom.
      outputMsPerToken: 100,
      // A chat answer rarely runs past 2k tokens.
      assumedOutputTokens: 2048,
      // A decoding pod sends a token every fraction of a second, but an engine
      // may send a stream's headers before its prefill, and a 100k-token prompt
      // on a slow GPU may then be silent for firstByteMs + 50 s: 90 s covers it.
      streamIdleMs: 90_000,
    },
  },
  /** Batch: work done per GPU-second matters, a single request's wait less. */
  throughput: {
    // Prefix and adapter locality save prefill and adapter loads, the work
    // batch jobs repeat most; the running batch size barely changes
    // throughput under continuous batching, so it does not score.
    weights: builtinWeights("throughput"),
    admission: {
      enabled: true,
      // Deep queues keep every batch full; a batch job tolerates the wait.
      maxWaiting: 32,
      // Fuller caches are worth an occasional preemption for batch work.
      maxKvCache: 0.98,
      sheddableFactor: 0.5,
      criticalFactor: 2,
      // As for latency: the OpenAI SDKs ignore a Retry-After of 60 s or more.
      maxRetryAfterS: 59,
      // A batch job waits minutes (firstByteMs below allows five). Held plus
      // served must stay within the OpenAI SDKs' own timeout and Envoy's
      // stream idle timeout (10 minutes each), so Critical waits 5 at most.
      waitCriticalMs: 300_000,
      waitStandardMs: 180_000,
      waitSheddableMs: 60_000,
    },
    deadlines: {
      // Deep queues (maxWaiting 32) mean minutes before a request is scheduled.
      firstByteMs: 300_000,
      // Batch pools may be the slowest GPUs: twice latency's allowance.
      promptMsPerKToken: 1000,
      // 5 tokens/s: a full batch on a slow pod decodes slowly.
      outputMsPerToken: 200,
      // Batch jobs (summaries, extraction) run long.
      assumedOutputTokens: 4096,
      // A stream in a full batch may pause while long prefills run.
      streamIdleMs: 300_000,
    },
  },
} as const satisfies Record<string, ProfileConfig>;

export const partialWeightsSchema = z.strictObject(
  Object.fromEntries(SCORERS.map((s) => [s.name, weight.optional()])) as Record<ScorerName, z.ZodOptional<typeof weight>>,
);

/** A number in a range; `text` is the whole message. */
export const bounded = (text: string, ok: (v: number) => boolean) => z.number({ error: msg(text) }).refine(ok, { error: text });

/**
 * A wait budget: 0 (never hold) up to just under Envoy's stream idle timeout
 * (600 s in envoy/gateway.yaml): a held stream is silent, and one held longer
 * would be cut with a 408 before its 429.
 */
function waitBudget() {
  const text = "expected an integer 0..599000 (ms; 0 refuses at once; a held stream is silent, and Envoy cuts one silent for 600 s)";
  return bounded(text, (v) => Number.isInteger(v) && v >= 0 && v <= 599_000).optional();
}

const admissionSchema = z.strictObject({
  enabled: z.boolean({ error: msg("expected true or false") }).optional(),
  maxWaiting: bounded("expected a number > 0", (v) => v > 0 && Number.isFinite(v)).optional(),
  maxKvCache: bounded("expected a number in (0, 1]", (v) => v > 0 && v <= 1).optional(),
  sheddableFactor: bounded("expected a number in (0, 1]", (v) => v > 0 && v <= 1).optional(),
  criticalFactor: bounded("expected a number >= 1", (v) => v >= 1 && Number.isFinite(v)).optional(),
  // Up to an hour for clients that honour long waits; the OpenAI SDKs ignore a Retry-After of 60 s or more.
  maxRetryAfterS: bounded("expected an integer 1..3600", (v) => Number.isInteger(v) && v >= 1 && v <= 3600).optional(),
  waitCriticalMs: waitBudget(),
  waitStandardMs: waitBudget(),
  waitSheddableMs: waitBudget(),
});

/** An integer in 1..max; `text` names the range. */
export const intUpTo = (max: number) => {
  const text = `expected an integer 1..${max}`;
  return bounded(text, (v) => Number.isInteger(v) && v >= 1 && v <= max).optional();
};
export const HOUR_MS = 3_600_000;

const deadlinesSchema = z.strictObject({
  firstByteMs: intUpTo(HOUR_MS),
  promptMsPerKToken: intUpTo(HOUR_MS),
  outputMsPerToken: intUpTo(HOUR_MS),
  assumedOutputTokens: intUpTo(1_000_000),
  streamIdleMs: intUpTo(HOUR_MS),
});

export const profileSchema = z.strictObject({
  weights: partialWeightsSchema.optional(),
  admission: admissionSchema.optional(),
  deadlines: deadlinesSchema.optional(),
});
