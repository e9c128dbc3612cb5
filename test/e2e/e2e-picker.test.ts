// The inference-aware picker through a real Envoy with two workers, as a
// deployment runs it: fake engine pods behind the real
// aggregator, the official OpenAI client as the client. Every case drives
// both workers: each client is one keep-alive HTTP/1.1 connection, and the
// connections are chosen from Envoy's per-worker listener stats so that both
// workers hold some. Pool weights are the config's defaults (DEFAULT_WEIGHTS)
// unless a case says why not.
import OpenAI from "openai";
import { afterEach, describe, expect, it } from "vitest";
import { DEFAULT_WEIGHTS } from "../../host/config.js";
import type { Fleet, Pod } from "../../testing/fakeserver/index.js";
import { startFleetStack, type FleetPool, type Stack } from "../../testing/launcher/stack.js";
import { acceptedPerWorker, connect as connectOn, shared, type Conn } from "../helpers/connections.js";
import { waitFor } from "../helpers/stack.js";

// ---------------------------------------------------------------------------
// The stack: fake pods, the aggregator, Envoy with two workers.

type PickerPool = FleetPool;

interface PickerStack {
  stack: Stack;
  fleet: Fleet;
  pod(name: string): Pod;
  close(): Promise<void>;
}

/** startFleetStack with the config's default weights (unless a pool sets some) and an adjustable scrape cadence. */
async function startPickerStack(pools: PickerPool[], aggregator: Record<string, number> = {}): Promise<PickerStack> {
  const stack = await startFleetStack(pools, {}, {}, aggregator);
  return { stack, fleet: stack.fleet, pod: (name) => stack.fleet.pod(name), close: () => stack.close() };
}

let running: PickerStack | null = null;
const conns: Conn[] = [];

async function start(pools: PickerPool[], aggregator: Record<string, number> = {}): Promise<PickerStack> {
  running = await startPickerStack(pools, aggregator);
  return running;
}

afterEach(async () => {
  for (const c of conns.splice(0)) c.agent.destroy();
  await running?.close();
  running = null;
});

// ---------------------------------------------------------------------------
// Clients: one keep-alive connection each, on a known Envoy worker.

/** `perWorker` connections on each of Envoy's two workers, interleaved, closed after the case. */
async function connect(stack: Stack, perWorker: number): Promise<Conn[]> {
  return connectOn(stack, perWorker, "x", conns);
}

/** Waits until every connection's worker routes on a snapshot at least as new as the aggregator's now. */
async function waitInstalled(ps: PickerStack, list: Conn[]): Promise<void> {
  const version = Number(ps.stack.aggregator.current().version);
  await waitFor(`both workers to install snapshot ${version}`, async () => {
    for (const c of list) if ((await c.get("/health")).json.snapshot_version < version) return false;
    return true;
  });
}

/** Waits until the aggregator's view of a pod satisfies `check`, then until both workers route on it. */
async function waitForPod(
  ps: PickerStack,
  list: Conn[],
  what: string,
  podName: string,
  check: (e: ReturnType<PickerStack["stack"]["aggregator"]["current"]>["pools"][number]["endpoints"][number]) => boolean,
  timeoutMs = 10_000,
): Promise<void> {
  const address = ps.pod(podName).address;
  await waitFor(what, () => {
    const e = ps.stack.aggregator.current().pools.flatMap((p) => p.endpoints).find((x) => x.address === address);
    return e !== undefined && e.fresh && check(e);
  }, timeoutMs);
  await waitInstalled(ps, list);
}

/** Every endpoint fresh in the aggregator and that snapshot installed on both workers. */
async function waitAllFresh(ps: PickerStack, list: Conn[]): Promise<void> {
  await waitFor("every pod scraped", () =>
    ps.stack.aggregator.current().pools.every((p) => p.endpoints.every((e) => e.fresh)));
  await waitInstalled(ps, list);
}

const say = (text: string) => [{ role: "user" as const, content: text }];

/** One chat completion on a connection; the pod that answered. */
async function chat(
  conn: Conn,
  model: string,
  opts: { messages?: OpenAI.ChatCompletionMessageParam[]; maxTokens?: number; signal?: AbortSignal } = {},
): Promise<string> {
  conn.sent++;
  const { response, data } = await conn.client.chat.completions
    .create({ model, messages: opts.messages ?? say("Say hello"), max_tokens: opts.maxTokens ?? 4 }, { signal: opts.signal })
    .withResponse();
  expect(data.model).toBe(model);
  return response.headers.get("x-served-by") ?? "";
}

/**
 * How long a request may take before it counts as stuck behind a backlog: an
 * idle fake pod answers these in well under 1 s (an adapter load is 200 ms,
 * a 1,600-token prefill 0.4 s), with room for a loaded machine; a queued one
 * would take minutes.
 */
const GIVE_UP_MS = 10_000;

/**
 * Like chat, but a request still unanswered after `timeoutMs` is abandoned
 * (it is queued behind a long backlog): "" then.
 */
async function chatOrGiveUp(
  conn: Conn,
  model: string,
  timeoutMs: number,
  messages: OpenAI.ChatCompletionMessageParam[] = say("Say hello"),
): Promise<string> {
  try {
    return await chat(conn, model, { messages, signal: AbortSignal.timeout(timeoutMs) });
  } catch (err) {
    if (err instanceof OpenAI.APIUserAbortError || err instanceof OpenAI.APIConnectionTimeoutError) return "";
    throw err;
  }
}

/** Requests each pod's engine took since `before` (all of them, however they arrived). */
function submittedSince(ps: PickerStack, before: Record<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const p of ps.fleet.pods) {
    const n = p.engine.metrics().counters.submitted - (before[p.name] ?? 0);
    if (n > 0) out[p.name] = n;
  }
  return out;
}

function submitted(ps: PickerStack): Record<string, number> {
  return Object.fromEntries(ps.fleet.pods.map((p) => [p.name, p.engine.metrics().counters.submitted]));
}

/**
 * A long streaming request for `model` sent straight to a pod (not through
 * the gateway): it keeps the model (an adapter) in that pod's running batch
 * until `stop` is called.
 */
async function holdRunning(pod: Pod, model: string): Promise<{ stop(): void }> {
  const ac = new AbortController();
  const res = await fetch(`${pod.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model, messages: say(`keep ${model} busy`), max_tokens: 4000, stream: true }),
    signal: ac.signal,
  });
  expect(res.status).toBe(200);
  // Drain in the background until aborted.
  void res.body?.pipeTo(new WritableStream()).catch(() => {});
  return { stop: () => ac.abort() };
}

/** Counts of each value. */
function tally(values: string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const v of values) out[v] = (out[v] ?? 0) + 1;
  return out;
}

/**
 * Both workers served completions: each connection stayed the one its worker
 * accepted (no worker accepted another since `before`, but for `reconnects`),
 * and connections of both workers sent some.
 */
async function expectBothWorkersServed(ps: PickerStack, before: Record<string, number>, list: Conn[], reconnects = 0): Promise<void> {
  const after = await acceptedPerWorker(ps.stack);
  const opened = Object.keys(after).reduce((n, w) => n + after[w] - (before[w] ?? 0), 0);
  // A request given up on closes its connection; the next one on that client opens another.
  expect(opened, "reconnections").toBeLessThanOrEqual(reconnects);
  const perWorker = tally(list.flatMap((c) => Array<string>(c.sent).fill(c.worker)));
  expect(Object.keys(perWorker).length, `completions per worker: ${JSON.stringify(perWorker)}`).toBe(2);
}

// ---------------------------------------------------------------------------

const LLAMA = "llama-3.1-8b";

describe("LoRA affinity", () => {
  const llamaPool = (pods: string[]): PickerPool => ({
    name: "llama",
    baseModel: LLAMA,
    adapters: ["sql-lora", "chat-lora"],
    pods: pods.map((name) => ({ name })),
  });

  /**
   * Pod -> the model its one long request runs; waits until the aggregator
   * reports every adapter among them running and both workers route on it.
   */
  async function holdEach(ps: PickerStack, list: Conn[], hold: Record<string, string>): Promise<Array<{ stop(): void }>> {
    const held = await Promise.all(Object.entries(hold).map(([pod, model]) => holdRunning(ps.pod(pod), model)));
    for (const [pod, model] of Object.entries(hold)) {
      await waitForPod(ps, list, `${pod} to report ${model} running`, pod, (e) =>
        e.running >= 1 && (model === LLAMA || e.runningAdapters.includes(model)));
    }
    return held;
  }

  /**
   * Until the view both workers route on shows each of `pods` running its one
   * long request alone: a scrape may have caught the last request under way,
   * and on a slow machine the next one would meet that view.
   */
  async function heldAlone(ps: PickerStack, list: Conn[], pods: string[]): Promise<void> {
    for (const pod of pods) await waitForPod(ps, list, `${pod} to run its long request alone`, pod, (e) => e.running === 1 && e.waiting === 0);
  }

  // One running request on the adapter's pod must not outweigh the affinity
  // (the running scorer is a ratio: 1 vs 0 requests halves a score, it does
  // not zero it).
  it("sends an adapter's requests to the pod running it, from both workers", async () => {
    const ps = await start([llamaPool(["llama-a", "llama-b", "llama-c"])]);
    expect(ps.stack.config.pools[0].weights).toEqual(DEFAULT_WEIGHTS);
    const list = await connect(ps.stack, 2);
    await waitAllFresh(ps, list);
    const before = await acceptedPerWorker(ps.stack);
    const held = await holdEach(ps, list, { "llama-b": "sql-lora" });
    try {
      const served: string[] = [];
      for (let i = 0; i < 12; i++) {
        await heldAlone(ps, list, ["llama-b"]);
        served.push(await chat(list[i % list.length], "sql-lora"));
      }
      expect(tally(served)).toEqual({ "llama-b": 12 });
      expect(ps.pod("llama-a").engine.metrics().counters.loraLoads + ps.pod("llama-c").engine.metrics().counters.loraLoads).toBe(0);
    } finally {
      for (const h of held) h.stop();
    }
    await expectBothWorkersServed(ps, before, list);
  });

  it("sends an adapter's requests to the pod running it when every pod is equally busy", async () => {
    const ps = await start([llamaPool(["llama-a", "llama-b", "llama-c"])]);
    const list = await connect(ps.stack, 2);
    await waitAllFresh(ps, list);
    const before = await acceptedPerWorker(ps.stack);
    // One long request on every pod: sql-lora on b, chat-lora on c, the base model on a.
    const held = await holdEach(ps, list, { "llama-a": LLAMA, "llama-b": "sql-lora", "llama-c": "chat-lora" });
    try {
      const served: Record<string, string[]> = { "sql-lora": [], "chat-lora": [] };
      for (let i = 0; i < 12; i++) {
        for (const adapter of Object.keys(served)) {
          await heldAlone(ps, list, ["llama-a", "llama-b", "llama-c"]);
          served[adapter].push(await chat(list[i % list.length], adapter));
        }
      }
      expect(tally(served["sql-lora"])).toEqual({ "llama-b": 12 });
      expect(tally(served["chat-lora"])).toEqual({ "llama-c": 12 });
      // No pod loaded an adapter it was not already running.
      const loads = Object.fromEntries(["llama-a", "llama-b", "llama-c"].map((p) => [p, ps.pod(p).engine.metrics().counters.loraLoads]));
      expect(loads).toEqual({ "llama-a": 0, "llama-b": 1, "llama-c": 1 });
    } finally {
      for (const h of held) h.stop();
    }
    await expectBothWorkersServed(ps, before, list);
  });
});

describe("an adapter loaded nowhere", () => {
  // Every pod holds at most 2 sequences at once, so injected long requests
  // build a queue that stays (each runs for ~40 s).
  const pod = (name: string) => ({ name, engineConfig: { maxNumSeqs: 2 } });
  const COLD = ["cold-1", "cold-2", "cold-3", "cold-4", "cold-5", "cold-6", "cold-7", "cold-8"];
  const LONG = { promptTokens: 64, maxTokens: 4000 };

  it("goes to the pod with the most spare capacity, from both workers", async () => {
    const ps = await start([
      { name: "llama", baseModel: LLAMA, adapters: COLD, pods: ["llama-a", "llama-b", "llama-c", "llama-d"].map(pod) },
    ]);
    const list = await connect(ps.stack, 2);
    await waitAllFresh(ps, list);
    const before = await acceptedPerWorker(ps.stack);
    // a and b: 2 running, 10 queued; c: 2 running, 1 queued; d: idle.
    ps.pod("llama-a").injectLoad({ requests: 12, ...LONG });
    ps.pod("llama-b").injectLoad({ requests: 12, ...LONG });
    ps.pod("llama-c").injectLoad({ requests: 3, ...LONG });
    for (const [name, waiting] of [["llama-a", 10], ["llama-b", 10], ["llama-c", 1]] as const) {
      await waitForPod(ps, list, `${name} to queue ${waiting}`, name, (e) => e.waiting === waiting && e.running === 2);
    }
    const counts = submitted(ps);
    const served: string[] = [];
    for (let i = 0; i < COLD.length; i++) served.push(await chatOrGiveUp(list[i % list.length], COLD[i], GIVE_UP_MS));
    expect(submittedSince(ps, counts)).toEqual({ "llama-d": COLD.length });
    expect(served).toEqual(COLD.map(() => "llama-d"));
    await expectBothWorkersServed(ps, before, list);
  }, 60_000);

  // A scrape shows an adapter only while a request for it runs; where the
  // gateway sent it is known to every worker through the shared log (on the
  // next 20 ms tick), so the next request follows it even after the first
  // one finished and before any scrape could show it.
  it("the next request for it, from the other worker, follows the first one's pod", async () => {
    const ps = await start([
      { name: "llama", baseModel: LLAMA, adapters: COLD, pods: ["llama-a", "llama-b", "llama-c", "llama-d"].map(pod) },
    ]);
    const list = await connect(ps.stack, 2);
    await waitAllFresh(ps, list);
    // a and b busy, c and d idle: either of c and d will do, but one of them.
    ps.pod("llama-a").injectLoad({ requests: 12, ...LONG });
    ps.pod("llama-b").injectLoad({ requests: 12, ...LONG });
    for (const name of ["llama-a", "llama-b"]) {
      await waitForPod(ps, list, `${name} to queue`, name, (e) => e.waiting === 10);
    }
    const pairs: Record<string, string[]> = {};
    for (const adapter of COLD) {
      const first = await chatOrGiveUp(list[0], adapter, GIVE_UP_MS);
      await shared(list[0], list[1]);
      pairs[adapter] = [first, await chatOrGiveUp(list[1], adapter, GIVE_UP_MS)];
    }
    for (const [adapter, [first, second]] of Object.entries(pairs)) {
      expect(["llama-c", "llama-d"], `${adapter}: ${JSON.stringify(pairs)}`).toContain(first);
      expect(second, `${adapter}: ${JSON.stringify(pairs)}`).toBe(first);
    }
  }, 60_000);
});

describe("a shared prompt prefix", () => {
  // ~6 KiB of system prompt (~1,600 tokens): a cache hit saves ~0.4 s of prefill on the fake engine.
  const SYSTEM = Array.from({ length: 80 }, (_, i) => `Rule ${i}: answer as the support assistant of ACME Corp, politely and briefly.`).join(" ");
  const ask = (i: number) => [
    { role: "system" as const, content: SYSTEM },
    { role: "user" as const, content: `Question ${i}: where is my order?` },
  ];

  it("sticks to one pod across both workers until that pod saturates, then moves to one other pod", async () => {
    // At most 4 sequences per pod, so injected load makes a queue.
    const ps = await start([
      {
        name: "llama",
        baseModel: LLAMA,
        pods: ["llama-a", "llama-b", "llama-c"].map((name) => ({ name, engineConfig: { maxNumSeqs: 4 } })),
      },
    ]);
    expect(JSON.stringify(ask(0)).length).toBeGreaterThan(5_000);
    const list = await connect(ps.stack, 2);
    await waitAllFresh(ps, list);
    const before = await acceptedPerWorker(ps.stack);

    const first: string[] = [];
    for (let i = 0; i < 12; i++) {
      first.push(await chat(list[i % list.length], LLAMA, { messages: ask(i) }));
      // The other worker's first request comes once it knows this one's pod (a prefill takes long enough, but not on every machine).
      if (i === 0) await shared(list[0], list[1]);
    }
    const holder = first[0];
    expect(tally(first)).toEqual({ [holder]: 12 });
    // The engine really served the prompt from its cache.
    const hits = ps.pod(holder).engine.metrics().counters;
    expect(hits.prefixCacheHits / hits.prefixCacheQueries).toBeGreaterThan(0.8);

    // Saturate the holder: 4 long requests running, 20 queued behind them.
    ps.pod(holder).injectLoad({ requests: 24, promptTokens: 64, maxTokens: 4000 });
    await waitForPod(ps, list, `${holder} to queue 20`, holder, (e) => e.waiting === 20);
    const counts = submitted(ps);
    const moved: string[] = [];
    for (let i = 12; i < 24; i++) {
      moved.push(await chatOrGiveUp(list[i % list.length], LLAMA, GIVE_UP_MS, ask(i)));
      if (i === 12) await shared(list[0], list[1]);
    }
    expect(submittedSince(ps, counts)[holder] ?? 0, JSON.stringify(moved)).toBe(0);
    // Off the saturated pod, the prefix settles on one other pod (which now holds it) rather than spraying.
    const next = moved[0];
    expect(next).not.toBe(holder);
    expect(tally(moved)).toEqual({ [next]: 12 });
    await expectBothWorkersServed(ps, before, list);
  }, 90_000);
});

describe("steady metrics", () => {
  // The aggregator pushes a snapshot only when a pod's state changes. With a
  // 50 ms scrape the idle pod's gauges move under this traffic on nearly
  // every scrape, and a new snapshot resets any count kept per snapshot, which
  // would hide a count that drifts between snapshots; a scrape every 5 s
  // stands in for steady metrics (a pod that finishes its requests between
  // scrapes). A filter that counts its picks per snapshot and never releases
  // them sends 38 of the 300 requests here to the busy pod (11 at a 2 s
  // scrape), so this case tells the two designs apart.
  it("do not drift traffic onto a pod with a long queue while metrics hold steady", async () => {
    const ps = await start([
      {
        name: "llama",
        baseModel: LLAMA,
        pods: [
          { name: "idle" },
          // One sequence at a time, 100x slow: what is queued there stays queued for the whole test.
          { name: "busy", engineConfig: { maxNumSeqs: 1, speed: 0.01 } },
        ],
      },
    ], { scrapeIntervalMs: 5_000, staleAfterMs: 15_000 });
    const list = await connect(ps.stack, 3);
    await waitAllFresh(ps, list);
    const before = await acceptedPerWorker(ps.stack);
    ps.pod("busy").injectLoad({ requests: 51, promptTokens: 64, maxTokens: 1000 });
    await waitForPod(ps, list, "busy to queue 50", "busy", (e) => e.waiting === 50 && e.running === 1, 20_000);

    const counts = submitted(ps);
    const TOTAL = 300;
    const served: string[] = [];
    let next = 0;
    // Each connection sends its requests one after the other: 6 in flight at most, 3 per worker.
    await Promise.all(list.map(async (conn) => {
      while (next < TOTAL) {
        const i = next++;
        served.push(await chatOrGiveUp(conn, LLAMA, 2_000, say(`Short question ${i}`)));
      }
    }));
    const landed = submittedSince(ps, counts);
    // Nearly all: at most 1% may meet the busy pod.
    expect(landed.busy ?? 0, JSON.stringify(landed)).toBeLessThanOrEqual(3);
    expect(landed.idle).toBeGreaterThanOrEqual(TOTAL - 3);
    const gaveUp = served.filter((s) => s === "").length;
    await expectBothWorkersServed(ps, before, list, gaveUp);
  }, 120_000);
});

describe("SGLang and TGI fleets", () => {
  it("route by load in each dialect, and TGI adapter requests (no adapter metrics) by load alone", async () => {
    // Two sequences per pod, so injected load queues.
    const pods = (prefix: string) => ["a", "b", "c"].map((x) => ({ name: `${prefix}-${x}`, engineConfig: { maxNumSeqs: 2 } }));
    const ps = await start([
      { name: "qwen", baseModel: "qwen3-32b", engine: "sglang", pods: pods("sglang") },
      { name: "mistral", baseModel: "mistral-7b", engine: "tgi", adapters: ["tgi-lora"], pods: pods("tgi") },
    ]);
    const list = await connect(ps.stack, 2);
    await waitAllFresh(ps, list);
    const before = await acceptedPerWorker(ps.stack);
    for (const busy of ["sglang-b", "tgi-a"]) ps.pod(busy).injectLoad({ requests: 12, promptTokens: 64, maxTokens: 4000 });
    // Each dialect read right: the queue shows in the aggregator's view.
    for (const busy of ["sglang-b", "tgi-a"]) {
      await waitForPod(ps, list, `${busy} to queue 10`, busy, (e) => e.waiting === 10 && e.running === 2);
    }
    const tgiView = ps.stack.aggregator.current().pools[1].endpoints;
    expect(tgiView.map((e) => [e.maxLora, e.runningAdapters.length])).toEqual([[0, 0], [0, 0], [0, 0]]);

    const counts = submitted(ps);
    const served: Record<string, string[]> = { "qwen3-32b": [], "mistral-7b": [], "tgi-lora": [] };
    for (let i = 0; i < 8; i++) {
      for (const model of Object.keys(served)) served[model].push(await chatOrGiveUp(list[i % list.length], model, GIVE_UP_MS));
    }
    const landed = submittedSince(ps, counts);
    expect(landed["sglang-b"] ?? 0, JSON.stringify(landed)).toBe(0);
    expect(landed["tgi-a"] ?? 0, JSON.stringify(landed)).toBe(0);
    for (const s of served["qwen3-32b"]) expect(s).toMatch(/^sglang-[ac]$/);
    for (const s of [...served["mistral-7b"], ...served["tgi-lora"]]) expect(s).toMatch(/^tgi-[bc]$/);
    await expectBothWorkersServed(ps, before, list);
  }, 120_000);
});
