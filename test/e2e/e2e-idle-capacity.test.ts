// Idle capacity through a real Envoy with two workers: the gateway must not
// refuse capacity its pods have, and must keep LoRA affinity while there is
// plenty of it. Two idle vLLM-shaped fake pods that each batch 256 sequences,
// one pool, and the pool's adapter sql-lora loaded on one pod only: the one
// the gateway sent it to first (its home). Idle, neither pod lists it, as
// vLLM lists adapters only while requests use them, so only the gateway's
// memory of that placement, shared by both workers, says where it is. 4 to
// 64 clients (the official OpenAI client, each on its own keep-alive
// connection, half on each worker) use at most an eighth of those 512 batch
// slots, so every request should be admitted and the adapter's requests
// should stay on the pod that has it. A pool that really is saturated must still be refused, with a
// Retry-After of at most a minute, and a refused body resent at once must not
// be let in ahead of new work: only a retry that waited as told earns that.
//
// The gateway runs as configured by default (the latency profile, admission
// on). Every scenario starts on a fresh stack, so nothing one sent (the
// adapter loaded on the other pod, the gateway's memory of where it sent the
// adapter or of refused bodies, its drain rates) carries into the next. The
// numbers are printed whether or not the assertions hold, so that runs can be
// compared.
import OpenAI from "openai";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import type { FleetPool } from "../../testing/launcher/stack.js";
import { connect, shared, type Conn } from "../helpers/connections.js";
import { waitFor } from "../helpers/stack.js";
import { startTrafficStack, waitForView, type TrafficOptions, type TrafficStack } from "../helpers/traffic.js";

const LLAMA = "llama-3.1-8b";
const ADAPTER = "sql-lora";
const PODS = ["idle-a", "idle-b"];
/** Sequences each pod runs in one batch: vLLM's default max_num_seqs, set explicitly so the test says what it relies on. */
const BATCH = 256;
const LEVELS = [4, 8, 32, 64];
/** Requests each client sends one after another in a loop scenario. */
const ROUNDS = 4;
/** Short outputs: with the engine's default costs a request takes ~50 ms on an idle pod (~250 ms where the adapter must load). */
const OUTPUT_TOKENS = 4;
/** Far beyond any answer here; a request still unanswered by then counts as failed (status 0). */
const ANSWER_MS = 10_000;

// ---------------------------------------------------------------------------
// What each test starts, stopped in afterEach.

let stack: TrafficStack | null = null;
const conns: Conn[] = [];
const held: AbortController[] = [];

async function stopStack(): Promise<void> {
  for (const ac of held.splice(0)) ac.abort();
  for (const c of conns.splice(0)) c.agent.destroy();
  await stack?.close();
  stack = null;
}

afterEach(stopStack);

/** The fleet of this file: one pool, two pods, the adapter loaded on neither yet. */
async function startIdleFleet(opts: TrafficOptions = {}): Promise<TrafficStack> {
  // The two pods are the same engine, and the pool says so (as an operator
  // may): a fake pod's real-time speed is this test process's CPU, which a
  // loaded machine gives the busier pod less of, so a learned speed would
  // test the machine too.
  const pool: FleetPool = {
    name: "llama",
    baseModel: LLAMA,
    adapters: [ADAPTER],
    statedCapacity: 1,
    pods: PODS.map((name) => ({ name, engineConfig: { maxNumSeqs: BATCH } })),
  };
  // The fake pods share this process's event loop with up to 64 clients, so a
  // scrape may answer late: a view that goes stale here (a pod dropped from the
  // candidates, or the filter routing blind) would test the machine's speed,
  // not placement. Staleness has its own tests.
  stack = await startTrafficStack([pool], {
    ...opts,
    aggregator: { staleAfterMs: 10_000, ...opts.aggregator },
    gateway: { staleView: { maxAgeMs: 15_000 }, ...opts.gateway },
  });
  return stack;
}

// ---------------------------------------------------------------------------
// The fleet's state, as the pods report it.

/** The few series of a pod's /metrics this file checks; lora_requests_info is its newest series (vLLM leaves old ones). */
async function podMetrics(ps: TrafficStack, pod: string): Promise<{ running: number; waiting: number; lora: Record<string, string> }> {
  const text = await (await fetch(`${ps.fleet.pod(pod).url}/metrics`)).text();
  const value = (name: string) => Number(new RegExp(`^${name}\\{[^}]*\\} (\\S+)$`, "m").exec(text)?.[1] ?? NaN);
  let lora: Record<string, string> = {};
  let newest = -Infinity;
  for (const m of text.matchAll(/^vllm:lora_requests_info\{([^}]*)\} (\S+)$/gm)) {
    if (Number(m[2]) <= newest) continue;
    newest = Number(m[2]);
    lora = Object.fromEntries([...m[1].matchAll(/(\w+)="([^"]*)"/g)].map((l) => [l[1], l[2]]));
  }
  return { running: value("vllm:num_requests_running"), waiting: value("vllm:num_requests_waiting"), lora };
}

/**
 * The premise of every scenario, checked before it starts: both pods idle
 * and batching 256, sql-lora resident on `home` only (none: on neither), no
 * pod listing it (vLLM lists only adapters with requests in flight), and
 * both workers routing on a view that says so.
 */
async function expectIdleFleet(ps: TrafficStack, list: Conn[], home: string | null): Promise<void> {
  for (const name of PODS) {
    const m = ps.fleet.pod(name).engine.metrics();
    expect(ps.fleet.pod(name).engine.config.maxNumSeqs, name).toBe(BATCH);
    expect([m.numRunning, m.numWaiting], name).toEqual([0, 0]);
    expect(m.residentAdapters, name).toEqual(name === home ? [ADAPTER] : []);
    const scraped = await podMetrics(ps, name);
    expect(scraped, name).toEqual({
      running: 0,
      waiting: 0,
      lora: { max_lora: String(m.maxLoras), running_lora_adapters: "", waiting_lora_adapters: "" },
    });
  }
  await waitForView(ps, list, "both pods fresh and idle, no adapter listed", (es) =>
    es.length === 2 &&
    es.every((e) => e.fresh && e.waiting === 0 && e.running === 0 && e.maxLora > 0) &&
    es.every((e) => e.runningAdapters.length === 0 && e.waitingAdapters.length === 0));
}

/**
 * Sends one sql-lora request on `list[0]` and waits until the other worker
 * knows where it went (the placement is shared on the workers' refresh
 * ticks): the adapter's home, loaded there and listed nowhere once idle.
 */
async function placeAdapter(ps: TrafficStack, list: Conn[]): Promise<string> {
  const first = await ask(list[0], ADAPTER);
  expect(first.status, JSON.stringify(first)).toBe(200);
  await shared(list[0], list.find((c) => c.worker !== list[0].worker)!);
  await expectIdleFleet(ps, list, first.pod);
  return first.pod;
}

// ---------------------------------------------------------------------------
// Requests.

// Every body is new (the gateway treats a body it refused and sees again as
// that request's retry), and short: below the 256 bytes of the shallowest
// prefix key, so the prefix scorer has nothing to follow.
let said = 0;

interface Outcome {
  model: string;
  /** HTTP status; 0 when unanswered within ANSWER_MS, -1 when the connection failed. */
  status: number;
  /** x-served-by: the pod that answered (set by every fake pod). */
  pod: string;
  retryAfter: string | null;
  /** The OpenAI error code of a refusal (e.g. pool_saturated). */
  code: string;
}

/** One chat completion on `conn`; an HTTP error is returned, not thrown. */
async function ask(conn: Conn, model: string, timeoutMs = ANSWER_MS): Promise<Outcome> {
  const messages = [{ role: "user" as const, content: `Request ${said++}: say hello` }];
  try {
    const { response } = await conn.client.chat.completions
      .create({ model, messages, max_tokens: OUTPUT_TOKENS }, { signal: AbortSignal.timeout(timeoutMs) })
      .withResponse();
    return { model, status: response.status, pod: response.headers.get("x-served-by") ?? "", retryAfter: null, code: "" };
  } catch (err) {
    if (err instanceof OpenAI.APIError && err.status !== undefined) {
      const body = err.error as { code?: string } | undefined;
      return { model, status: err.status, pod: err.headers?.get("x-served-by") ?? "", retryAfter: err.headers?.get("retry-after") ?? null, code: body?.code ?? "" };
    }
    if (err instanceof OpenAI.APIUserAbortError) return { model, status: 0, pod: "", retryAfter: null, code: "unanswered" };
    return { model, status: -1, pod: "", retryAfter: null, code: String(err) };
  }
}

/** Whether the i-th connection's k-th request is for the adapter: half of each worker's, half of each round's. */
const forAdapter = (i: number, k: number) => (Math.floor(i / 2) + k) % 2 === 0;

// ---------------------------------------------------------------------------
// The scenarios and what they produced.

interface Summary {
  scenario: string;
  requests: number;
  ok: number;
  refused429: number;
  /** Other non-200 statuses, with their codes. */
  otherFailures: string[];
  /** The pod the gateway placed sql-lora on before the scenario. */
  home: string;
  adapterServed: number;
  adapterOnHome: number;
  /** adapterOnHome / adapterServed (1 when none was served). */
  adapterShare: number;
  /** Requests each pod answered (its x-served-by). */
  perPod: Record<string, number>;
  /** What the pods' own counters say they received: requests Envoy sent twice would show here. */
  podsReceived: number;
  /** How many times the pods that are not home loaded the adapter. */
  otherAdapterLoads: number;
  retryAfter: string[];
  ms: number;
}

const summaries: Summary[] = [];

function summarise(scenario: string, ps: TrafficStack, home: string, outcomes: Outcome[], receivedBefore: number, ms: number): Summary {
  const adapter = outcomes.filter((o) => o.model === ADAPTER && o.status === 200);
  const perPod: Record<string, number> = {};
  for (const o of outcomes) if (o.status === 200) perPod[o.pod] = (perPod[o.pod] ?? 0) + 1;
  const onHome = adapter.filter((o) => o.pod === home).length;
  return {
    scenario,
    requests: outcomes.length,
    ok: outcomes.filter((o) => o.status === 200).length,
    refused429: outcomes.filter((o) => o.status === 429).length,
    otherFailures: outcomes.filter((o) => o.status !== 200 && o.status !== 429).map((o) => `${o.status} ${o.code}`),
    home,
    adapterServed: adapter.length,
    adapterOnHome: onHome,
    adapterShare: adapter.length === 0 ? 1 : onHome / adapter.length,
    perPod,
    podsReceived: ps.fleet.pods.reduce((n, p) => n + p.engine.metrics().counters.submitted, 0) - receivedBefore,
    otherAdapterLoads: ps.fleet.pods.reduce((k, p) => k + (p.name !== home ? p.engine.metrics().counters.loraLoads : 0), 0),
    retryAfter: outcomes.filter((o) => o.status === 429).map((o) => o.retryAfter ?? "(none)"),
    ms,
  };
}

/**
 * `n` clients on a fresh idle fleet, half on each worker. "burst": each sends
 * one request, all at once. "loop": each sends ROUNDS requests one after the
 * other, all clients together. Half the requests are for the adapter.
 */
async function scenario(n: number, shape: "burst" | "loop"): Promise<Summary> {
  const ps = await startIdleFleet();
  try {
    const list = await connect(ps, n / 2, "x", conns);
    await expectIdleFleet(ps, list, null);
    const home = await placeAdapter(ps, list);
    const receivedBefore = ps.fleet.pods.reduce((k, p) => k + p.engine.metrics().counters.submitted, 0);
    const outcomes: Outcome[] = [];
    const t0 = performance.now();
    if (shape === "burst") {
      outcomes.push(...(await Promise.all(list.map((c, i) => ask(c, forAdapter(i, 0) ? ADAPTER : LLAMA)))));
    } else {
      await Promise.all(list.map(async (c, i) => {
        for (let k = 0; k < ROUNDS; k++) outcomes.push(await ask(c, forAdapter(i, k) ? ADAPTER : LLAMA));
      }));
    }
    const ms = Math.round(performance.now() - t0);
    expect(outcomes.filter((o) => o.model === ADAPTER).length * 2).toBe(outcomes.length);
    const s = summarise(`${n} clients, ${shape}`, ps, home, outcomes, receivedBefore, ms);
    summaries.push(s);
    console.log(`[idle-capacity] ${JSON.stringify(s)}`);
    return s;
  } finally {
    await stopStack();
  }
}

afterAll(() => {
  if (summaries.length === 0) return;
  const table = summaries.map((s) =>
    `${s.scenario.padEnd(20)} requests ${String(s.requests).padStart(3)}  429s ${String(s.refused429).padStart(3)}  ` +
    `other failures ${s.otherFailures.length}  sql-lora on its home ${s.adapterOnHome}/${s.adapterServed} ` +
    `(${(100 * s.adapterShare).toFixed(1)}%)  Retry-After [${[...new Set(s.retryAfter)].join(",")}]  ${s.ms} ms`);
  const total = summaries.reduce((a, s) => ({ r: a.r + s.refused429, w: a.w + s.adapterOnHome, n: a.n + s.adapterServed }), { r: 0, w: 0, n: 0 });
  table.push(`overall: 429s ${total.r}, sql-lora on its home ${total.w}/${total.n} (${(100 * total.w / Math.max(total.n, 1)).toFixed(1)}%)`);
  console.log(`[idle-capacity] summary\n${table.join("\n")}`);
});

describe("the fleet these scenarios run on", () => {
  // What every scenario relies on, checked once in full: a batch of 256
  // really is 256 sequences running together on each pod, and the 257th
  // waits. The requests are long, so that state holds until this stack
  // is stopped, however slowly the test gets to look at it.
  it("is idle, batches 256 sequences per pod, and once sql-lora was placed has it on that pod only, listed nowhere", async () => {
    const ps = await startIdleFleet();
    const list = await connect(ps, 1, "x", conns);
    await expectIdleFleet(ps, list, null);
    await placeAdapter(ps, list);
    // Short prompts (~5 tokens): 257 of them fit one step's token budget, so only the batch limit holds one back.
    for (const p of ps.fleet.pods) p.injectLoad({ requests: BATCH + 1, promptTokens: 4, maxTokens: 4000 });
    await waitFor("each pod to run 256 and queue 1", () =>
      ps.fleet.pods.every((p) => p.engine.metrics().numRunning === BATCH && p.engine.metrics().numWaiting === 1));
    for (const name of PODS) expect(await podMetrics(ps, name), name).toMatchObject({ running: BATCH, waiting: 1 });
  });
});

describe("an idle fleet at low load", () => {
  for (const n of LEVELS) {
    it(`admits every request of ${n} clients (a burst, then a loop) and keeps sql-lora on the pod it placed it on`, async () => {
      const burst = await scenario(n, "burst");
      const loop = await scenario(n, "loop");
      const both = JSON.stringify({ burst, loop });
      // Nothing but 200s and the 429s counted below: a timeout or a 5xx would make the rest meaningless.
      expect([...burst.otherFailures, ...loop.otherFailures], both).toEqual([]);
      expect.soft(burst.refused429, `429s in the burst: ${both}`).toBe(0);
      expect.soft(loop.refused429, `429s in the loop: ${both}`).toBe(0);
      // The burst arrives at once on pods the view shows idle: every adapter request must stay.
      expect.soft(burst.adapterOnHome / Math.max(burst.adapterServed, 1), `share of the burst's sql-lora requests on its home: ${both}`).toBe(1);
      // In the loop the home pod runs more than the other, and at 64 clients the picker may load the
      // adapter on the other pod once; from then on both hold it and either serves it at no cost, so
      // what must not happen is the adapter moving back and forth (the home share is in the summary).
      expect.soft(burst.otherAdapterLoads + loop.otherAdapterLoads, `sql-lora loads on the other pod: ${both}`).toBeLessThanOrEqual(1);
    }, 60_000);
  }
});

describe("a saturated pool", () => {
  /**
   * Sends `content` on `conn` and reports whether the gateway refused it or
   * let it into the pool (seen arriving at a pod: the pods are frozen, so an
   * admitted request waits there until the test ends, its connection busy).
   */
  interface Reply {
    status: number;
    retryAfter: string | null;
    code: string;
    decision: string | null;
  }

  /**
   * Sends `content` on `conn` and reports whether the gateway refused it or
   * let it into the pool (seen arriving at a pod: the pods are frozen, so an
   * admitted request waits there until the test ends, its connection busy),
   * with when it was sent and when that was known.
   */
  async function send(ps: TrafficStack, conn: Conn, content: string, headers: Record<string, string> = {}) {
    expect(conn.busy).toBe(false);
    const submitted = () => ps.fleet.pods.map((p) => p.engine.metrics().counters.submitted);
    const before = submitted();
    const ac = new AbortController();
    held.push(ac);
    conn.busy = true;
    let reply: Reply | null = null;
    let answeredAt = 0;
    const sentAt = performance.now();
    void conn.client.chat.completions
      .create({ model: LLAMA, messages: [{ role: "user", content }], max_tokens: OUTPUT_TOKENS }, { headers, signal: ac.signal })
      .withResponse()
      .then(
        ({ response }): Reply => ({ status: response.status, retryAfter: null, code: "", decision: response.headers.get("x-gateway-decision") }),
        (err: unknown): Reply => err instanceof OpenAI.APIError && err.status !== undefined
          ? {
            status: err.status,
            retryAfter: err.headers?.get("retry-after") ?? null,
            code: (err.error as { code?: string } | undefined)?.code ?? "",
            decision: err.headers?.get("x-gateway-decision") ?? null,
          }
          : { status: -1, retryAfter: null, code: String(err), decision: null },
      )
      .then((r) => {
        answeredAt = performance.now();
        reply = r;
      });
    let pod = "";
    await waitFor(`"${content}" to be answered or reach a pod`, () => {
      if (reply !== null) return true;
      const now = submitted();
      const i = now.findIndex((v, k) => v > before[k]);
      if (i >= 0) pod = ps.fleet.pods[i].name;
      return pod !== "";
    });
    if (reply !== null) conn.busy = false;
    return { admitted: pod !== "", pod, reply: reply as Reply | null, sentAt, answeredAt };
  }

  /**
   * A fresh stack whose pods each run a full batch with exactly Standard's
   * queue limit waiting (no class held), then are frozen (a step lasts minutes): nothing
   * finishes or starts while the test runs. A new Standard request is
   * refused, while a retry's limit (halfway to Critical's) and Critical's
   * still have room, so a refused retry is the gateway's choice, not a pool
   * beyond every limit.
   */
  async function startSaturated(perWorker: number, opts: TrafficOptions = {}): Promise<{ ps: TrafficStack; list: Conn[]; queued: number }> {
    // No class is held (wait budgets 0): these cases are about refusals at once and their retries
    // (holding is e2e-queueing.test.ts's).
    const noHold = { latency: { admission: { waitCriticalMs: 0, waitStandardMs: 0, waitSheddableMs: 0 } } };
    const ps = await startIdleFleet({ profiles: noHold, ...opts });
    const list = await connect(ps, perWorker, "x", conns);
    await expectIdleFleet(ps, list, null);
    const queued = Math.ceil(ps.config.profiles.latency.admission.maxWaiting);
    for (const p of ps.fleet.pods) p.injectLoad({ requests: BATCH + queued, promptTokens: 4, maxTokens: 4000 });
    await waitFor(`each pod to run ${BATCH} and queue ${queued}`, () =>
      ps.fleet.pods.every((p) => p.engine.metrics().numRunning === BATCH && p.engine.metrics().numWaiting === queued));
    for (const p of ps.fleet.pods) p.engine.config.speed = 1e-4;
    await waitForView(ps, list, `both pods running ${BATCH} with ${queued} waiting`, (es) =>
      es.length === 2 && es.every((e) => e.fresh && e.running === BATCH && e.waiting === queued));
    return { ps, list, queued };
  }

  it("refuses 64 clients' new requests, a burst then a loop, each with a Retry-After <= 60", async () => {
    const { ps, list } = await startSaturated(32);
    const submittedBefore = ps.fleet.pods.reduce((k, p) => k + p.engine.metrics().counters.submitted, 0);
    // Every answer is the gateway's own 429; a request unanswered this long was let in (it waits behind the frozen batch).
    const refusalMs = 5_000;
    const outcomes: Outcome[] = [];
    outcomes.push(...(await Promise.all(list.map((c, i) => ask(c, forAdapter(i, 0) ? ADAPTER : LLAMA, refusalMs)))));
    const burst = outcomes.length;
    await Promise.all(list.map(async (c, i) => {
      for (let k = 0; k < ROUNDS; k++) outcomes.push(await ask(c, forAdapter(i, k) ? ADAPTER : LLAMA, refusalMs));
    }));
    // NaN (no header) counts as neither low nor high here; the checks below catch it.
    const values = outcomes.map((o) => Number(o.retryAfter ?? NaN));
    const report = {
      requests: outcomes.length,
      refused429: outcomes.filter((o) => o.status === 429).length,
      admitted: ps.fleet.pods.reduce((k, p) => k + p.engine.metrics().counters.submitted, 0) - submittedBefore,
      other: outcomes.filter((o) => o.status !== 429).map((o) => `${o.status} ${o.code}`),
      retryAfterBurst: { min: Math.min(...values.slice(0, burst)), max: Math.max(...values.slice(0, burst)) },
      retryAfterLoop: { min: Math.min(...values.slice(burst)), max: Math.max(...values.slice(burst)) },
      over60: values.filter((v) => v > 60).length,
    };
    console.log(`[idle-capacity] saturated pool, 64 clients: ${JSON.stringify(report)}`);
    const why = JSON.stringify(report);
    expect.soft(report.other, `every request should be refused: ${why}`).toEqual([]);
    for (const o of outcomes.filter((x) => x.status === 429)) {
      expect(o.code, why).toBe("pool_saturated");
      expect(o.retryAfter, why).toMatch(/^[1-9]\d*$/);
    }
    expect.soft(report.over60, `Retry-After values above 60: ${why}`).toBe(0);
  }, 60_000);

  it("gives a refused body resent at once, before its Retry-After, no preference: it is refused again", async () => {
    // Critical open to all, so the last step can show there is room above
    // Standard's limit; every response explains its decision.
    const { ps, list, queued } = await startSaturated(2, { traffic: { critical: "any", debug: "all" } });
    const [a1, b1, a2, b2] = list;
    const rounds: Array<{ first: Awaited<ReturnType<typeof send>>; again: Awaited<ReturnType<typeof send>>; resentAfterMs: number }> = [];
    // The retry on the same connection, then on a connection of the other worker (every worker shares the memory of refusals).
    for (const [conn, retryConn] of [[a1, a1], [b1, a2]] as const) {
      const content = `Request ${said++}: say hello`;
      const first = await send(ps, conn, content);
      const again = await send(ps, retryConn, content);
      rounds.push({ first, again, resentAfterMs: Math.round(again.sentAt - first.answeredAt) });
    }
    const critical = await send(ps, b2, `Request ${said++}: say hello`, { "x-llm-priority": "critical" });
    const report = {
      waitingPerPod: queued,
      rounds: rounds.map((r) => ({
        first: r.first.reply ?? `admitted to ${r.first.pod}`,
        resentAfterMs: r.resentAfterMs,
        earlyRetry: r.again.admitted ? `ADMITTED to ${r.again.pod}` : r.again.reply,
      })),
      critical: critical.admitted ? `admitted to ${critical.pod}` : critical.reply,
    };
    console.log(`[idle-capacity] saturated pool, early retries: ${JSON.stringify(report)}`);

    for (const r of rounds) {
      const why = JSON.stringify(report);
      expect(r.first.admitted, `a new request should be refused: ${why}`).toBe(false);
      expect(r.first.reply!.status, why).toBe(429);
      expect(r.first.reply!.code, why).toBe("pool_saturated");
      const retryAfter = r.first.reply!.retryAfter ?? "";
      expect(retryAfter, `Retry-After: ${why}`).toMatch(/^[1-9]\d*$/);
      // The premise of the next check: the resend really came before its Retry-After.
      expect(r.resentAfterMs, why).toBeLessThan(Number(retryAfter) * 1000);
      expect.soft(r.again.admitted, `the early retry should be refused again: ${why}`).toBe(false);
      if (!r.again.admitted) expect.soft(r.again.reply!.status, why).toBe(429);
    }
    expect(critical.admitted, `the pool should still take a Critical request (else the checks above prove nothing): ${JSON.stringify(report)}`).toBe(true);
  });
});
