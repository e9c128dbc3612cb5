import { describe, expect, it } from "vitest";
import {
  blockHashes,
  countTokens,
  Engine,
  type EngineConfigInput,
  type EngineEvent,
  RequestRejectedError,
  type RequestStats,
} from "../../testing/engine/index.js";

const MODEL = "llama-3.1-8b";

/** Distinct, deterministic prompt text of `tokens` tokens (4 chars per token). */
function text(tag: string, tokens: number): string {
  const unit = `${tag}|`;
  return unit.repeat(Math.ceil((tokens * 4) / unit.length)).slice(0, tokens * 4);
}

function engine(overrides: Partial<EngineConfigInput> = {}): Engine {
  return new Engine({ model: MODEL, ...overrides });
}

/** Run the engine in virtual time until idle; returns every event. */
function drain(e: Engine): EngineEvent[] {
  const events: EngineEvent[] = [];
  for (let t = e.nextEventTime(); Number.isFinite(t); t = e.nextEventTime()) events.push(...e.advanceTo(t));
  events.push(...e.advanceTo(e.now));
  return events;
}

function finished(events: EngineEvent[]): Map<string, RequestStats> {
  const out = new Map<string, RequestStats>();
  for (const ev of events) if (ev.type === "finished") out.set(ev.id, ev.stats);
  return out;
}

/** TTFT of a probe request submitted at `at` after `setup` ran. */
function probeTtft(e: Engine, at: number, prompt = text("probe", 100)): number {
  e.advanceTo(at);
  e.submit({ id: "probe", prompt, maxTokens: 4 }, at);
  const stats = finished(drain(e)).get("probe");
  return stats?.ttftMs ?? NaN;
}

describe("engine timing", () => {
  it("an idle engine costs overhead + prefill to the first token, then overhead + decode per token", () => {
    const e = engine();
    e.submit({ id: "a", prompt: text("a", 100), maxTokens: 3 }, 5);
    const s = finished(drain(e)).get("a")!;
    // 10 ms overhead + 100 tokens * 0.25 ms, then per decode step 10 + 0.06 + 0.05 per 1000 tokens of context (101, then 102).
    expect(s.ttftMs).toBeCloseTo(35, 9);
    const step1 = 10 + 0.06 + 0.05 * 0.101;
    const step2 = 10 + 0.06 + 0.05 * 0.102;
    expect(s.tokenTimes.map((t) => t - 5)).toEqual([35, 35 + step1, 35 + step1 + step2].map((x) => expect.closeTo(x, 9)));
    expect(s.e2eMs).toBeCloseTo(35 + step1 + step2, 9);
    expect(s.outputTokens).toBe(3);
  });

  it("a longer context decodes slower, by decodeMsPerKTokens per 1000 tokens of it", () => {
    const itl = (promptTokens: number): number => {
      const e = engine();
      e.submit({ id: "r", prompt: text("r", promptTokens), maxTokens: 3 }, 0);
      const times = finished(drain(e)).get("r")!.tokenTimes;
      return times[2] - times[1]; // the second decode step: context = prompt + 2
    };
    const short = itl(100);
    const long = itl(8000);
    expect(short).toBeCloseTo(10 + 0.06 + 0.05 * 0.102, 9);
    expect(long - short).toBeCloseTo(0.05 * 7.9, 9);
    // The default profile keeps a typical chat request's ITL at batch 20 near 12 ms.
    const chat = engine();
    for (let i = 0; i < 20; i++) chat.submit({ id: `c${i}`, prompt: text(`c${i}`, 700), maxTokens: 180 }, 0);
    // Once the last prompt is in, all 20 decode together (~700-800 tokens of context each).
    const last = finished(drain(chat)).get("c19")!.tokenTimes;
    expect(last[2] - last[1]).toBeGreaterThan(11.8);
    expect(last[2] - last[1]).toBeLessThan(12.1);
  });

  it("chunks a long prompt over steps capped by maxNumBatchedTokens", () => {
    const e = engine();
    e.submit({ id: "long", prompt: text("l", 5000), maxTokens: 1 }, 0);
    const s = finished(drain(e)).get("long")!;
    // 2048 + 2048 + 904 tokens in three steps.
    expect(s.ttftMs).toBeCloseTo(3 * 10 + 5000 * 0.25, 9);
  });

  it("a slower speed factor raises TTFT in proportion", () => {
    const fast = probeTtft(engine({ speed: 1 }), 0);
    const slow = probeTtft(engine({ speed: 0.35 }), 0);
    expect(slow).toBeGreaterThan(fast);
    expect(slow / fast).toBeCloseTo(1 / 0.35, 6);
  });

  it("a longer queue raises TTFT (queue time is included)", () => {
    const ttftWithQueue = (queued: number): number => {
      const e = engine({ maxNumSeqs: 4 });
      for (let i = 0; i < queued; i++) e.submit({ id: `q${i}`, prompt: text(`q${i}`, 200), maxTokens: 50 }, 0);
      e.advanceTo(0);
      if (queued > 4) expect(e.metrics().numWaiting).toBe(queued - 4);
      return probeTtft(e, 1);
    };
    const t0 = ttftWithQueue(0);
    const t4 = ttftWithQueue(4);
    const t16 = ttftWithQueue(16);
    expect(t4).toBeGreaterThan(t0);
    expect(t16).toBeGreaterThan(t4);
    // 16 queued with 4 seats: the probe waits for four generations of 50-token requests.
    expect(t16).toBeGreaterThan(4 * 50 * 10);
  });

  it("is deterministic for the same inputs", () => {
    const run = (): EngineEvent[] => {
      const e = engine({ numGpuBlocks: 64, maxNumSeqs: 8 });
      const all: EngineEvent[] = [];
      for (let i = 0; i < 40; i++) {
        all.push(...e.advanceTo(i * 7));
        e.submit({ id: `r${i}`, prompt: text(`p${i % 5}`, 30 + i * 3), maxTokens: 5 + (i % 9) }, i * 7);
      }
      return all.concat(drain(e));
    };
    expect(run()).toEqual(run());
  });
});

describe("KV cache and preemption", () => {
  it("preempts the newest running request when decode runs out of blocks, and requeues it first", () => {
    // 12 blocks of 16 tokens; two 64-token prompts growing to 164 tokens each cannot both fit.
    const e = engine({ numGpuBlocks: 12, maxNumSeqs: 2 });
    e.submit({ id: "old", prompt: text("old", 64), maxTokens: 100 }, 0);
    e.submit({ id: "new", prompt: text("new", 64), maxTokens: 100 }, 1);
    // Queued behind them; too big (7 blocks) to run beside "new" (6 blocks) once it resumes.
    e.submit({ id: "later", prompt: text("later", 112), maxTokens: 4 }, 2);

    const events: EngineEvent[] = [];
    let preemptedAt: number | undefined;
    for (let t = e.nextEventTime(); Number.isFinite(t) && preemptedAt === undefined; t = e.nextEventTime()) {
      const batch = e.advanceTo(t);
      events.push(...batch);
      preemptedAt = batch.find((ev) => ev.type === "preempted")?.time;
    }
    expect(events.filter((ev) => ev.type === "preempted").map((ev) => ev.id)).toEqual(["new"]);
    expect(e.requestState("new")).toBe("waiting");
    expect(e.requestState("old")).toBe("running");
    expect(e.metrics()).toMatchObject({ numRunning: 1, numWaiting: 2, counters: { preemptions: 1 } });

    events.push(...drain(e));
    const done = finished(events);
    expect(done.get("new")!.preemptions).toBe(1);
    expect(done.get("new")!.outputTokens).toBe(100);
    // "new" went back ahead of "later", which only starts once "new" is done.
    const laterFirst = done.get("later")!.tokenTimes[0];
    expect(laterFirst).toBeGreaterThan(done.get("new")!.arrival + done.get("new")!.e2eMs);
    expect(e.metrics().kvUsage).toBe(0);
  });

  it("admits a request only when its blocks can be allocated", () => {
    const e = engine({ numGpuBlocks: 10, maxNumSeqs: 8 });
    e.submit({ id: "a", prompt: text("a", 96), maxTokens: 10 }, 0); // 6 blocks
    e.submit({ id: "b", prompt: text("b", 96), maxTokens: 10 }, 0); // 6 more do not fit
    e.advanceTo(0);
    expect(e.metrics()).toMatchObject({ numRunning: 1, numWaiting: 1, usedBlocks: 6 });
    expect(e.metrics().kvUsage).toBeCloseTo(0.6, 9);
    const done = finished(drain(e));
    expect(done.get("b")!.ttftMs!).toBeGreaterThan(done.get("a")!.e2eMs);
  });

  it("rejects a request that can never fit", () => {
    const e = engine({ numGpuBlocks: 4 });
    expect(() => e.submit({ id: "x", prompt: text("x", 60), maxTokens: 10 }, 0)).toThrowError(RequestRejectedError);
    try {
      e.submit({ id: "x", prompt: text("x", 60), maxTokens: 10 }, 0);
    } catch (err) {
      expect((err as RequestRejectedError).code).toBe("context_length_exceeded");
    }
    expect(e.metrics().numWaiting).toBe(0);
  });

  it("a cached prefix shortens prefill and is counted in tokens", () => {
    const e = engine();
    const shared = text("system prompt", 1000);
    e.submit({ id: "first", prompt: shared + " question one", maxTokens: 2 }, 0);
    const first = finished(drain(e)).get("first")!;
    // Finished requests free their blocks but leave them cached.
    expect(e.metrics().kvUsage).toBe(0);

    e.submit({ id: "second", prompt: shared + " question two", maxTokens: 2 }, 1000);
    const second = finished(drain(e)).get("second")!;
    expect(second.cachedTokens).toBe(Math.floor(1000 / 16) * 16);
    expect(second.ttftMs!).toBeLessThan(first.ttftMs! / 5);
    const { counters } = e.metrics();
    expect(counters.prefixCacheHits).toBe(second.cachedTokens);
    expect(counters.prefixCacheQueries).toBe(first.promptTokens + second.promptTokens);

    // Hashes are chained: the same text shifted by one character shares nothing.
    e.submit({ id: "shifted", prompt: "x" + shared, maxTokens: 1 }, 2000);
    expect(finished(drain(e)).get("shifted")!.cachedTokens).toBe(0);
  });

  it("adapters never share prefix blocks with the base model", () => {
    const e = engine();
    const prompt = text("same", 320);
    e.submit({ id: "base", prompt, maxTokens: 1 }, 0);
    drain(e);
    e.submit({ id: "lora", prompt, maxTokens: 1, adapter: "sql" }, 1000);
    expect(finished(drain(e)).get("lora")!.cachedTokens).toBe(0);
  });

  it("evicts least recently freed cached blocks first", () => {
    // 40 blocks; each 320-token prompt fills 20 of them.
    const e = engine({ numGpuBlocks: 40 });
    const run = (id: string, prompt: string, at: number): RequestStats => {
      e.submit({ id, prompt, maxTokens: 1 }, at);
      return finished(drain(e)).get(id)!;
    };
    const p1 = text("one", 320);
    const p2 = text("two", 320);
    run("p1", p1, 0);
    run("p2", p2, 1000);
    run("p3", text("three", 320), 2000); // must evict 20 blocks: p1's are the oldest
    // At most 19 blocks hit: vLLM always recomputes the last prompt token.
    expect(run("p2-again", p2, 3000).cachedTokens).toBe(19 * 16);
    expect(run("p1-again", p1, 4000).cachedTokens).toBe(0);
  });
});

describe("LoRA adapters", () => {
  it("a missing adapter costs its load delay once", () => {
    const base = probeTtft(engine(), 0);
    const e = engine({ loraLoadMs: 200 });
    e.submit({ id: "cold", prompt: text("probe", 100), maxTokens: 4, adapter: "sql" }, 0);
    const cold = finished(drain(e)).get("cold")!;
    expect(cold.ttftMs).toBeCloseTo(base + 200, 9);
    e.submit({ id: "warm", prompt: text("probe2", 100), maxTokens: 4, adapter: "sql" }, 1000);
    expect(finished(drain(e)).get("warm")!.ttftMs).toBeCloseTo(base, 9);
    expect(e.metrics().counters.loraLoads).toBe(1);
  });

  it("max_loras limits how many adapters are resident and running", () => {
    const e = engine({ maxLoras: 1, loraLoadMs: 200 });
    e.submit({ id: "a", prompt: text("a", 100), maxTokens: 20, adapter: "sql" }, 0);
    e.submit({ id: "b", prompt: text("b", 100), maxTokens: 20, adapter: "chat" }, 0);
    e.submit({ id: "base", prompt: text("c", 100), maxTokens: 20 }, 0);
    e.advanceTo(0);
    const m = e.metrics();
    // The blocked adapter does not hold up the base-model request behind it.
    expect(m).toMatchObject({
      maxLoras: 1,
      numRunning: 2,
      numWaiting: 1,
      runningAdapters: ["sql"],
      waitingAdapters: ["chat"],
      residentAdapters: ["sql"],
    });
    const done = finished(drain(e));
    const a = done.get("a")!;
    expect(done.get("b")!.ttftMs!).toBeGreaterThanOrEqual(a.e2eMs + 200);
    expect(e.metrics()).toMatchObject({ residentAdapters: ["chat"], runningAdapters: [], waitingAdapters: [] });
    expect(e.metrics().counters.loraLoads).toBe(2);
  });

  it("a pinned adapter is resident from the start, costs no load and is never evicted", () => {
    const base = probeTtft(engine(), 0);
    const e = engine({ maxLoras: 2, loraLoadMs: 200 });
    e.pinAdapter("sql");
    expect(e.metrics()).toMatchObject({ numRunning: 0, residentAdapters: ["sql"], pinnedAdapters: ["sql"], runningAdapters: [] });
    e.submit({ id: "warm", prompt: text("warm", 100), maxTokens: 4, adapter: "sql" }, 0);
    expect(finished(drain(e)).get("warm")!.ttftMs).toBeCloseTo(base, 9);
    // Two other adapters one after the other through the one free slot: the
    // second evicts the first, never the pinned one.
    e.submit({ id: "a", prompt: text("a", 100), maxTokens: 4, adapter: "chat" }, 1000);
    drain(e);
    e.submit({ id: "b", prompt: text("b", 100), maxTokens: 4, adapter: "code" }, 2000);
    drain(e);
    expect(e.metrics().residentAdapters.sort()).toEqual(["code", "sql"]);
    expect(e.metrics().counters.loraLoads).toBe(2);
  });

  it("a pinned adapter holds its slot: another adapter waits for the other slot", () => {
    const e = engine({ maxLoras: 2 });
    e.pinAdapter("sql");
    e.submit({ id: "a", prompt: text("a", 100), maxTokens: 20, adapter: "chat" }, 0);
    e.submit({ id: "b", prompt: text("b", 100), maxTokens: 20, adapter: "code" }, 0);
    e.submit({ id: "c", prompt: text("c", 100), maxTokens: 20, adapter: "sql" }, 0);
    e.advanceTo(0);
    expect(e.metrics()).toMatchObject({ numRunning: 2, runningAdapters: ["chat", "sql"], waitingAdapters: ["code"] });
    expect(() => e.pinAdapter("chat")).not.toThrow();
    expect(() => e.pinAdapter("code")).toThrow(/slots are pinned/);
    expect(() => engine({ maxLoras: 0 }).pinAdapter("sql")).toThrow(/not enabled/);
  });

  it("with enough slots, different adapters run together", () => {
    const e = engine({ maxLoras: 2 });
    e.submit({ id: "a", prompt: text("a", 100), maxTokens: 20, adapter: "sql" }, 0);
    e.submit({ id: "b", prompt: text("b", 100), maxTokens: 20, adapter: "chat" }, 0);
    e.advanceTo(0);
    expect(e.metrics()).toMatchObject({ numRunning: 2, runningAdapters: ["sql", "chat"], waitingAdapters: [] });
  });
});

describe("abort and metrics", () => {
  it("abort frees a running request's blocks and reports it", () => {
    const e = engine();
    e.submit({ id: "a", prompt: text("a", 100), maxTokens: 100 }, 0);
    e.advanceTo(100);
    expect(e.metrics().usedBlocks).toBeGreaterThan(0);
    expect(e.abort("a", 100)).toBe(true);
    const ev = e.advanceTo(100).find((x) => x.type === "finished");
    expect(ev).toMatchObject({ type: "finished", id: "a", reason: "abort" });
    expect(e.metrics()).toMatchObject({ numRunning: 0, usedBlocks: 0, counters: { aborted: 1, finished: 0 } });
    expect(e.abort("a", 100)).toBe(false);
    // The step already on the GPU still runs to its end; then the engine idles.
    e.advanceTo(e.nextEventTime());
    expect(e.nextEventTime()).toBe(Infinity);
  });

  it("records TTFT in the histogram and counts tokens", () => {
    const e = engine();
    for (let i = 0; i < 3; i++) e.submit({ id: `r${i}`, prompt: text(`r${i}`, 100), maxTokens: 5 }, 0);
    drain(e);
    const m = e.metrics();
    expect(m.ttft.count).toBe(3);
    expect(m.ttft.cumulative.at(-1)).toBe(3);
    expect(m.counters).toMatchObject({ submitted: 3, finished: 3, generationTokens: 15, promptTokens: 300 });
    // One prefill step for all three: 10 + 300 * 0.25 = 85 ms each.
    expect(m.ttft.sum).toBeCloseTo(3 * 0.085, 9);
    expect(m.ttft.cumulative[m.ttft.bounds.indexOf(0.08)]).toBe(0);
    expect(m.ttft.cumulative[m.ttft.bounds.indexOf(0.1)]).toBe(3);
  });

  it("refuses to move time backwards", () => {
    const e = engine();
    e.advanceTo(10);
    expect(() => e.advanceTo(5)).toThrowError(RangeError);
  });
});

describe("word-piece tokens and attention in prefill (the simulator's pods)", () => {
  it("cuts text at spaces and every 5 other characters, so a token's bytes vary with the words", () => {
    expect(countTokens("hello world", 4, "words")).toBe(2);
    expect(countTokens("internationalisation of it", 4, "words")).toBe(6);
    expect(countTokens("internationalisation of it", 4, "fixed")).toBe(7);
    // Two texts of as many bytes, and as many tokens in the fixed count, cut differently into 16-token blocks.
    const short = "ab ".repeat(64).trimEnd();
    const long = "abcdefghij ".repeat(64).slice(0, short.length);
    expect(countTokens(short, 4, "words")).toBe(64);
    expect(countTokens(long, 4, "words")).toBe(35);
    expect(blockHashes(short, MODEL, 16, 4, "words")).toHaveLength(4);
    // A block covers the same tokens, not the same bytes: two texts sharing 16 word tokens share a block.
    const a = blockHashes(`${"one ".repeat(16)}two`, MODEL, 16, 4, "words");
    const b = blockHashes(`${"one ".repeat(16)}three four`, MODEL, 16, 4, "words");
    expect(a[0]).toBe(b[0]);
  });

  it("an engine counts the prompt it is given in word pieces", () => {
    const e = engine({ tokenizer: "words" });
    expect(e.submit({ id: "r", prompt: "hello world, internationalisation", maxTokens: 1 }, 0)).toBe(countTokens("hello world, internationalisation", 4, "words"));
  });

  it("prices prefill by the context ahead of each token: at 32k tokens of context, twice the short-prompt cost per token", () => {
    const cost = (tokens: number) => {
      const e = engine({ prefillMsPerKTokens: 0.008, maxModelLen: 40_000, numGpuBlocks: 4_000, maxNumBatchedTokens: 64_000 });
      e.submit({ id: "r", prompt: text("p", tokens), maxTokens: 1 }, 0);
      return finished(drain(e)).get("r")!.ttftMs! - 10;
    };
    // 0.25 ms a token, plus 0.008 x (tokens / 2) / 1000 per token on average.
    expect(cost(1_000)).toBeCloseTo(1_000 * (0.25 + 0.008 * 0.5), 6);
    expect(cost(32_000) / 32_000).toBeCloseTo(0.25 + 0.008 * 16, 6);
    // A prompt chunked over steps pays each chunk's attention by the context already computed.
    const e = engine({ prefillMsPerKTokens: 0.008, maxModelLen: 40_000, numGpuBlocks: 4_000, maxNumBatchedTokens: 8_000 });
    e.submit({ id: "r", prompt: text("p", 16_000), maxTokens: 1 }, 0);
    const chunked = finished(drain(e)).get("r")!.ttftMs!;
    expect(chunked).toBeCloseTo(2 * 10 + 16_000 * 0.25 + (0.008 * (8_000 * 4_000 + 8_000 * 12_000)) / 1000, 6);
  });
});
