// The soak's request mix, drawn from a seeded generator: chat and text
// completions, streamed or not, for every model and adapter of the soak's
// pools, with and without a priority class, plus a share of requests that
// are wrong on purpose and must get their documented error.
import { deriveSeed, Rng } from "../fixtures/rng.js";
import { SERVED_MODELS } from "./gateway-config.js";

export const GOOD_KINDS = ["chat", "completion"] as const;
/** Requests that must be refused: a body that is not JSON, a model no pool serves, a priority that names no class. */
export const BAD_KINDS = ["malformed-json", "unknown-model", "bad-priority"] as const;
export type RequestKind = (typeof GOOD_KINDS)[number] | (typeof BAD_KINDS)[number];

export interface PlannedRequest {
  index: number;
  /** Since the start of the load. */
  atMs: number;
  kind: RequestKind;
  model: string;
  stream: boolean;
  /** The x-llm-priority header, when sent. */
  priority: string | null;
  maxTokens: number;
  /** One of a few long shared openings (the prefix scorer's work), then a line of its own. */
  prefix: number;
}

export const MIN_OUTPUT_TOKENS = 16;
export const MAX_OUTPUT_TOKENS = 96;
const BAD_SHARE = 0.1;
const CHAT_SHARE = 0.65;
const STREAM_SHARE = 0.5;
const PRIORITIES = [null, "standard", "critical", "sheddable"] as const;
const PRIORITY_WEIGHTS = [0.45, 0.2, 0.15, 0.2];
export const SHARED_PREFIXES = 6;
export const UNKNOWN_MODEL = "no-such-model";
export const UNKNOWN_PRIORITY = "urgent";

/** An endless seeded stream of requests at `ratePerS` (Poisson arrivals). */
export function* planTraffic(seed: number, ratePerS: number): Generator<PlannedRequest> {
  const rng = new Rng(deriveSeed(seed, "soak-traffic"));
  const modelWeights = SERVED_MODELS.map((m) => m.weight);
  let atMs = 0;
  for (let index = 0; ; index++) {
    atMs += rng.exponential(ratePerS) * 1000;
    const bad = rng.next() < BAD_SHARE;
    const kind: RequestKind = bad ? BAD_KINDS[rng.int(BAD_KINDS.length)] : rng.next() < CHAT_SHARE ? "chat" : "completion";
    const model = kind === "unknown-model" ? UNKNOWN_MODEL : SERVED_MODELS[rng.weighted(modelWeights)].name;
    yield {
      index,
      atMs,
      kind,
      model,
      stream: rng.next() < STREAM_SHARE,
      priority: kind === "bad-priority" ? UNKNOWN_PRIORITY : PRIORITIES[rng.weighted(PRIORITY_WEIGHTS)],
      maxTokens: MIN_OUTPUT_TOKENS + rng.int(MAX_OUTPUT_TOKENS - MIN_OUTPUT_TOKENS + 1),
      prefix: rng.int(SHARED_PREFIXES),
    };
  }
}
