/**
 * The request trace of a scenario: arrival times, models and adapters,
 * lengths and shared prefixes, drawn once per seed and replayed unchanged
 * for every policy. Texts are built on demand from compact fields, so a
 * trace of tens of thousands of long prompts stays small.
 */
import { renderChat } from "../../testing/fakeserver/openai.js";
import { distMax, type Arrivals, type ClassMix, type LengthDist, type Scenario } from "../scenario.js";
import { PRIORITIES, type Priority } from "../types.js";
import { deriveSeed, Rng } from "../../testing/fixtures/rng.js";

/** Characters per token of the engine model (testing/engine DEFAULT_ENGINE_CONFIG.charsPerToken). */
const CHARS_PER_TOKEN = 4;

export interface TraceRequest {
  /** Position in the trace; also the request id. */
  index: number;
  arrivalMs: number;
  /** Envoy worker whose connection carries the request. */
  worker: number;
  /** Index into scenario.models: the pool that serves it. */
  pool: number;
  /** The `model` of the body: the base model or an adapter name. */
  model: string;
  adapter: string | undefined;
  /** Index into trace.prefixes, or -1. */
  prefixGroup: number;
  userTokens: number;
  maxTokens: number;
  /** Where the user text starts in the filler corpus. */
  fillerOffset: number;
  /** Flow-control class the client sends (scenario `classes`; Standard without). */
  priority: Priority;
}

export interface Trace {
  requests: TraceRequest[];
  /** Shared system prompts. */
  prefixes: string[];
  /** Adapter names per model (scenario order), most popular tier first. */
  adapters: string[][];
  corpus: string;
}

/** The words every prompt is made of (real-engine pods get them as single tokens). */
export const CORPUS_WORDS = [
  "alpha", "bravo", "cargo", "delta", "ember", "fjord", "gamma", "harbor", "ivory", "juniper", "kernel", "lumen",
  "meadow", "nectar", "orbit", "prism", "quartz", "raven", "sierra", "tundra", "umber", "vector", "willow", "xenon",
  "yonder", "zephyr",
];

/** Lowercase words and spaces only, so bodies need no JSON escaping. */
function makeCorpus(rng: Rng, minChars: number): string {
  const parts: string[] = [];
  let len = 0;
  while (len < minChars) {
    const w = CORPUS_WORDS[rng.int(CORPUS_WORDS.length)];
    parts.push(w);
    len += w.length + 1;
  }
  return parts.join(" ");
}

function drawLength(d: LengthDist, rng: Rng): number {
  switch (d.dist) {
    case "fixed":
      return d.value;
    case "uniform":
      return d.min + rng.int(d.max - d.min + 1);
    case "lognormal":
      return Math.min(d.max, Math.max(d.min, Math.round(d.median * Math.exp(d.sigma * rng.normal()))));
    case "mixture":
      return drawLength(d.parts[rng.weighted(d.parts.map((p) => p.weight))], rng);
  }
}

/** Requests/s at time t (s), and an upper bound for thinning. */
function rateFunction(a: Arrivals, durationS: number): { rate: (t: number) => number; max: number } {
  switch (a.pattern) {
    case "poisson":
      return { rate: () => a.rate, max: a.rate };
    case "ramp":
      return { rate: (t) => a.from + ((a.to - a.from) * t) / durationS, max: Math.max(a.from, a.to) };
    case "phases": {
      const cycle = a.phases.reduce((s, p) => s + p.durationS, 0);
      return {
        rate: (t) => {
          let x = t % cycle;
          for (const p of a.phases) {
            if (x < p.durationS) return p.rate;
            x -= p.durationS;
          }
          return a.phases[a.phases.length - 1].rate;
        },
        max: Math.max(...a.phases.map((p) => p.rate)),
      };
    }
  }
}

/** Arrival times (ms) of a non-homogeneous Poisson process, by thinning. */
function arrivalTimes(a: Arrivals, durationS: number, rng: Rng): number[] {
  const { rate, max } = rateFunction(a, durationS);
  const out: number[] = [];
  let t = 0;
  for (;;) {
    t += rng.exponential(max);
    if (t >= durationS) return out;
    if (rng.next() * max < rate(t)) out.push(t * 1000);
  }
}

function adapterNames(scenario: Scenario): string[][] {
  return scenario.models.map((m) => {
    const count = (m.adapters?.tiers ?? []).reduce((s, t) => s + t.count, 0);
    return Array.from({ length: count }, (_, i) => `${m.name}-lora-${String(i + 1).padStart(2, "0")}`);
  });
}

/** Per model: the chance of each adapter (tier share split evenly), and of the base model last. */
function adapterWeights(scenario: Scenario): number[][] {
  return scenario.models.map((m) => {
    if (!m.adapters) return [1];
    const tiersTotal = m.adapters.tiers.reduce((s, t) => s + t.share, 0);
    const w: number[] = [];
    for (const tier of m.adapters.tiers) {
      for (let i = 0; i < tier.count; i++) w.push(((1 - m.adapters.baseShare) * tier.share) / tiersTotal / tier.count);
    }
    w.push(m.adapters.baseShare);
    return w;
  });
}

/**
 * Each request's class, from its own stream: a scenario that gains a class
 * mix keeps every other draw (arrivals, lengths, models) as it was.
 */
function classDraws(mix: ClassMix | undefined, n: number, seed: number): Priority[] {
  if (!mix) return new Array<Priority>(n).fill("standard");
  const rng = new Rng(deriveSeed(seed, "classes"));
  const weights = PRIORITIES.map((p) => mix[p] ?? 0);
  return Array.from({ length: n }, () => PRIORITIES[rng.weighted(weights)]);
}

export function generateTrace(scenario: Scenario, seed: number): Trace {
  const arrivals = arrivalTimes(scenario.arrivals, scenario.durationS, new Rng(deriveSeed(seed, "arrivals")));
  const rng = new Rng(deriveSeed(seed, "requests"));
  const prefix = scenario.sharedPrefix;
  const promptOf = (c: Priority) => scenario.classLengths?.[c]?.prompt ?? scenario.prompt;
  const outputOf = (c: Priority) => scenario.classLengths?.[c]?.output ?? scenario.output;
  const longestUser = Math.max(...PRIORITIES.map((c) => distMax(promptOf(c)))) * CHARS_PER_TOKEN;
  const corpus = makeCorpus(new Rng(deriveSeed(seed, "corpus")), Math.max(2 * longestUser, (prefix?.tokens ?? 0) * CHARS_PER_TOKEN + 1024, 65536));
  const prefixes = Array.from({ length: prefix?.groups ?? 0 }, (_, g) => {
    // A distinct head makes every group's block hashes differ from the first block.
    const head = `system prompt ${g}: `;
    const len = prefix!.tokens * CHARS_PER_TOKEN - head.length;
    const start = rng.int(corpus.length - len);
    return head + corpus.slice(start, start + len);
  });
  const adapters = adapterNames(scenario);
  const adapterWeight = adapterWeights(scenario);
  const modelShares = scenario.models.map((m) => m.share);
  const classes = classDraws(scenario.classes, arrivals.length, seed);
  // Zipf weights of the prefix groups. Without `zipf` the group is drawn as it always was, so
  // existing traces stay byte-identical; either draw takes one number, so no later draw moves.
  const groupWeights = prefix?.zipf ? Array.from({ length: prefix.groups }, (_, g) => (g + 1) ** -prefix.zipf!) : undefined;
  const drawGroup = (groups: number): number => (groupWeights ? rng.weighted(groupWeights) : rng.int(groups));

  const requests = arrivals.map((arrivalMs, index): TraceRequest => {
    const pool = rng.weighted(modelShares);
    const a = rng.weighted(adapterWeight[pool]);
    const adapter = a < adapters[pool].length ? adapters[pool][a] : undefined;
    const userTokens = drawLength(promptOf(classes[index]), rng);
    return {
      index,
      arrivalMs,
      worker: rng.int(scenario.gateway.workers),
      pool,
      model: adapter ?? scenario.models[pool].name,
      adapter,
      prefixGroup: prefix && rng.next() < prefix.fraction ? drawGroup(prefix.groups) : -1,
      userTokens,
      maxTokens: drawLength(outputOf(classes[index]), rng),
      fillerOffset: rng.int(corpus.length - userTokens * CHARS_PER_TOKEN),
      priority: classes[index],
    };
  });
  return { requests, prefixes, adapters, corpus };
}

type Message = { role: string; content: string };

function messages(trace: Trace, r: TraceRequest): Message[] {
  // The request number leads the user text, so no two requests share a block past the system prompt.
  const tag = `#${r.index} `;
  const chars = Math.max(0, r.userTokens * CHARS_PER_TOKEN - tag.length);
  const user: Message = { role: "user", content: tag + trace.corpus.slice(r.fillerOffset, r.fillerOffset + chars) };
  return r.prefixGroup >= 0 ? [{ role: "system", content: trace.prefixes[r.prefixGroup] }, user] : [user];
}

/** The OpenAI chat body a client sends. */
export function requestBody(trace: Trace, r: TraceRequest): string {
  return JSON.stringify({ model: r.model, messages: messages(trace, r), max_tokens: r.maxTokens, stream: true });
}

/** The prompt text the engine sees: the messages through the fake server's chat template. */
export function enginePrompt(trace: Trace, r: TraceRequest): string {
  return renderChat(messages(trace, r));
}
