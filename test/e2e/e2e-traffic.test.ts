// Traffic management through a real Envoy with two workers, as a deployment
// runs it: admission with 429 + Retry-After by class,
// Critical claimed only by a JWT claim, a 90/10 canary, a route matching
// x-gateway-model-name, and debug output for the allowed client only. Fake
// engine pods behind the real aggregator; the official OpenAI client as the
// client, each one keep-alive connection on a known Envoy worker, and every
// case drives both workers.
//
// Queues are made with injected load on pods that run one sequence at a
// time (maxNumSeqs 1): the running request generates 4,000 tokens (~40 s),
// so what waits behind it keeps waiting for the whole test, and a request
// the gateway admits into that pool stays queued too (it is "held": seen
// arriving at a pod, then abandoned when the test ends).
import OpenAI from "openai";
import { afterEach, describe, expect, it } from "vitest";
import type { FleetPool } from "../../testing/launcher/stack.js";
import { waitFor } from "../helpers/stack.js";
import { acceptedPerWorker, connect, type Conn } from "../helpers/connections.js";
import {
  gatewayStats,
  makeJwt,
  startTrafficStack,
  statSegment,
  waitForView,
  type Jwt,
  type TrafficOptions,
  type TrafficStack,
} from "../helpers/traffic.js";

const LLAMA = "llama-3.1-8b";
const LLAMA_NEXT = "llama-3.2-8b";

// ---------------------------------------------------------------------------
// What each test starts, stopped in afterEach.

let stack: TrafficStack | null = null;
let jwt: Jwt | null = null;
const conns: Conn[] = [];
const held: AbortController[] = [];

afterEach(async () => {
  for (const ac of held.splice(0)) ac.abort();
  for (const c of conns.splice(0)) c.agent.destroy();
  await stack?.close();
  stack = null;
  jwt?.remove();
  jwt = null;
});

/**
 * The cases count queues against limits of 2 / 4 / 8 (Sheddable / Standard /
 * Critical): the latency profile with maxWaiting 4. No class is held (wait
 * budgets 0): what finds no room is refused at once, as these cases check;
 * holding is e2e-queueing.test.ts's.
 */
const LIMITS = { latency: { admission: { maxWaiting: 4, waitCriticalMs: 0, waitStandardMs: 0, waitSheddableMs: 0 } } };

async function start(pools: FleetPool[], opts: TrafficOptions = {}): Promise<TrafficStack> {
  stack = await startTrafficStack(pools, { profiles: LIMITS, ...opts });
  return stack;
}

// ---------------------------------------------------------------------------
// Requests.

// Every body is new: the gateway takes a body it refused and sees again for that request's retry.
let said = 0;
const say = (text: string) => [{ role: "user" as const, content: `${text} #${said++}` }];

interface Reply {
  status: number;
  headers: Headers;
  /** The completion (200). */
  body: any;
  /** The OpenAI error object (otherwise). */
  error: any;
}

/**
 * Every answer here comes in well under a second (an idle fake pod, or the
 * gateway's own 429); a request still unanswered after this was queued
 * behind a long backlog: status 0 then, so that a wrong admission fails fast.
 */
const ANSWER_MS = 5_000;

/** One chat completion; an HTTP error is returned, not thrown. */
async function ask(conn: Conn, model: string, headers: Record<string, string> = {}, maxTokens = 1): Promise<Reply> {
  try {
    const { response, data } = await conn.client.chat.completions
      .create({ model, messages: say("Say hello"), max_tokens: maxTokens }, { headers, signal: AbortSignal.timeout(ANSWER_MS) })
      .withResponse();
    return { status: response.status, headers: response.headers, body: data, error: null };
  } catch (err) {
    if (err instanceof OpenAI.APIError && err.status !== undefined && err.headers) {
      return { status: err.status, headers: err.headers, body: null, error: err.error };
    }
    if (err instanceof OpenAI.APIUserAbortError) {
      return { status: 0, headers: new Headers(), body: null, error: { message: `no answer within ${ANSWER_MS} ms (queued?)` } };
    }
    throw err;
  }
}

function submittedPerPod(ps: TrafficStack): Record<string, number> {
  return Object.fromEntries(ps.fleet.pods.map((p) => [p.name, p.engine.metrics().counters.submitted]));
}

/**
 * Sends a request into a saturated-looking pool and returns the pod it was
 * admitted to, as soon as that pod has it (it stays queued there; the
 * connection stays busy until the test ends). Fails if the gateway answers.
 */
async function hold(ps: TrafficStack, conn: Conn, model: string, headers: Record<string, string>): Promise<string> {
  expect(conn.busy).toBe(false);
  const before = submittedPerPod(ps);
  const ac = new AbortController();
  held.push(ac);
  conn.busy = true;
  let answer: string | null = null;
  void conn.client.chat.completions
    .create({ model, messages: say(`Queue me (${held.length})`), max_tokens: 8 }, { headers, signal: ac.signal })
    .then(
      () => (answer = "200"),
      (err: unknown) => (answer = err instanceof OpenAI.APIError ? `${err.status} ${JSON.stringify(err.error)}` : String(err)),
    );
  let pod = "";
  const what = `${model} ${JSON.stringify({ ...headers, authorization: undefined })}`;
  await waitFor(`${what} to reach a pod or be answered`, () => {
    if (answer !== null) return true;
    const now = submittedPerPod(ps);
    pod = Object.keys(now).find((p) => now[p] > before[p]) ?? "";
    return pod !== "";
  });
  expect(answer, `${what} should have been admitted`).toBeNull();
  return pod;
}

/** An idle connection on `worker`. */
function idle(list: Conn[], worker: string): Conn {
  const c = list.find((x) => x.worker === worker && !x.busy);
  if (!c) throw new Error(`no idle connection left on ${worker}`);
  return c;
}

const workersOf = (list: Conn[]) => [...new Set(list.map((c) => c.worker))];

/**
 * A pool_saturated refusal: 429 in the OpenAI format with a positive integer
 * Retry-After; with debug on, the decision names the class. Its Retry-After.
 */
function expectSaturated(r: Reply, cls: string, model = LLAMA, debug = true): number {
  expect(r.status, JSON.stringify(r.error ?? r.body)).toBe(429);
  expect(r.error).toMatchObject({ type: "rate_limit_error", code: "pool_saturated" });
  expect(r.error.message).toContain(`saturated for ${cls} requests`);
  const retryAfter = r.headers.get("retry-after") ?? "";
  expect(retryAfter).toMatch(/^[1-9]\d*$/);
  expect(Number(retryAfter)).toBeLessThanOrEqual(60); // the latency profile's maxRetryAfterS
  const decision = r.headers.get("x-gateway-decision");
  if (debug) {
    expect(decision).toContain(`refused=pool_saturated; pool=llama; model=${model}; class=${cls}; profile=latency;`);
    expect(decision).toContain(`; retry_after_s=${retryAfter}`);
  } else {
    expect(decision).toBeNull();
  }
  return Number(retryAfter);
}

/** Waits until the gateway's counters (flushed on the filter's 20 ms tick) include `expected`. */
async function expectStats(ps: TrafficStack, expected: Record<string, number>): Promise<Record<string, number>> {
  let last: Record<string, number> = {};
  try {
    await waitFor("the gateway's counters", async () => {
      last = await gatewayStats(ps);
      return Object.entries(expected).every(([k, v]) => (last[k] ?? 0) === v);
    });
  } catch {
    // Show every expected counter that differs.
    expect(Object.fromEntries(Object.keys(expected).map((k) => [k, last[k] ?? 0]))).toEqual(expected);
  }
  return last;
}

/** Queues long requests on a pod until `waiting` of them wait (one runs; maxNumSeqs 1). */
function queueUpTo(ps: TrafficStack, pod: string, waiting: number): void {
  const p = ps.fleet.pod(pod);
  const m = p.engine.metrics();
  const missing = waiting + 1 - m.numWaiting - m.numRunning;
  if (missing > 0) p.injectLoad({ requests: missing, promptTokens: 64, maxTokens: 4000 });
}

/** A pool of pods running one sequence at a time, so injected load queues. */
const serialPool = (pods: string[], adapters: string[] = []): FleetPool => ({
  name: "llama",
  baseModel: LLAMA,
  adapters,
  pods: pods.map((name) => ({ name, engineConfig: { maxNumSeqs: 1 } })),
});

const priority = (cls: string) => ({ "x-llm-priority": cls });
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

// ---------------------------------------------------------------------------

describe("admission", () => {
  // latency profile: queue limits Sheddable 2, Standard 4, Critical 8 per pod.
  it("refuses a saturated pool with 429 + Retry-After, Sheddable first, then Standard, Critical last; counted per class", async () => {
    const ps = await start([serialPool(["sat-a", "sat-b"])], { traffic: { critical: "any", debug: "all" } });
    const list = await connect(ps, 4, "x", conns);
    const [w0, w1] = workersOf(list);
    const injected: Record<string, number> = { "sat-a": 0, "sat-b": 0 };
    const queue = (waiting: number) => {
      const before = submittedPerPod(ps);
      for (const pod of ["sat-a", "sat-b"]) queueUpTo(ps, pod, waiting);
      const after = submittedPerPod(ps);
      for (const pod of Object.keys(injected)) injected[pod] += after[pod] - before[pod];
    };
    const retryAfters: Record<string, number[]> = { [w0]: [], [w1]: [] };

    // Both pods queue 2: at Sheddable's limit, under Standard's and Critical's.
    queue(2);
    await waitForView(ps, list, "both pods to queue 2", (es) => es.every((e) => e.fresh && e.waiting === 2 && e.running === 1));
    const landed: string[] = [];
    for (const w of [w0, w1]) {
      retryAfters[w].push(expectSaturated(await ask(idle(list, w), LLAMA, priority("sheddable")), "sheddable"));
      landed.push(await hold(ps, idle(list, w), LLAMA, priority("standard")));
      landed.push(await hold(ps, idle(list, w), LLAMA, priority("critical")));
    }
    // The held requests counted in the estimates at once: they spread over both pods.
    expect(new Set(landed)).toEqual(new Set(["sat-a", "sat-b"]));

    // More load: both pods queue at least 5, past Standard's limit, under Critical's.
    queue(5);
    await waitForView(ps, list, "both pods to queue 5 or more", (es) => es.every((e) => e.fresh && e.waiting >= 5 && e.waiting < 7));
    for (const w of [w0, w1]) {
      retryAfters[w].push(expectSaturated(await ask(idle(list, w), LLAMA, priority("sheddable")), "sheddable"));
      retryAfters[w].push(expectSaturated(await ask(idle(list, w), LLAMA, priority("sheddable")), "sheddable"));
      // No header: the model's default class, Standard.
      retryAfters[w].push(expectSaturated(await ask(idle(list, w), LLAMA), "standard"));
      retryAfters[w].push(expectSaturated(await ask(idle(list, w), LLAMA, priority("standard")), "standard"));
      await hold(ps, idle(list, w), LLAMA, priority("critical"));
    }

    // Past Critical's limit too: everything is refused.
    queue(8);
    await waitForView(ps, list, "both pods to queue 8 or more", (es) => es.every((e) => e.fresh && e.waiting >= 8));
    for (const w of [w0, w1]) {
      retryAfters[w].push(expectSaturated(await ask(idle(list, w), LLAMA, priority("critical")), "critical"));
    }

    // Retry-After is computed, not a constant: each refusal books a retry
    // ahead of the next one while nothing drains (no pod has room for
    // Sheddable), so on each worker it grows.
    for (const w of [w0, w1]) {
      const seq = retryAfters[w];
      for (let i = 1; i < seq.length; i++) expect(seq[i], JSON.stringify(retryAfters)).toBeGreaterThanOrEqual(seq[i - 1]);
      expect(seq[seq.length - 1], JSON.stringify(retryAfters)).toBeGreaterThan(seq[0]);
    }

    // What the pods received is what was admitted; per-class and per-pod counters agree.
    const received = Object.fromEntries(
      Object.entries(submittedPerPod(ps)).map(([pod, n]) => [pod, n - injected[pod]]),
    );
    expect(received["sat-a"] + received["sat-b"]).toBe(6);
    await expectStats(ps, {
      "llm_gateway.class_admitted_total;class=sheddable": 0,
      "llm_gateway.class_refused_total;class=sheddable": 6,
      "llm_gateway.class_admitted_total;class=standard": 2,
      "llm_gateway.class_refused_total;class=standard": 4,
      "llm_gateway.class_admitted_total;class=critical": 4,
      "llm_gateway.class_refused_total;class=critical": 2,
      "llm_gateway.critical_downgraded_total": 0,
      "llm_gateway.requests_refused_total;status=429;reason=pool_saturated": 12,
      [`llm_gateway.pod_picks_total;pool=llama;model_server=${ps.addressOf("sat-a")}`]: received["sat-a"],
      [`llm_gateway.pod_picks_total;pool=llama;model_server=${ps.addressOf("sat-b")}`]: received["sat-b"],
    });
  });
});

describe("who may claim Critical", () => {
  it("serves a token without the claim at the model's default class (refused, counted as downgraded); the claim admits Critical", async () => {
    jwt = makeJwt();
    const ps = await start([serialPool(["cls-a", "cls-b"], ["batch-lora"])], {
      gateway: { jwt: jwt.config },
      models: [{ name: "batch-lora", priority: "sheddable" }],
      traffic: { critical: { claim: "tier", values: ["premium"] }, debug: { claim: "team", values: ["sre"] } },
    });
    const list = await connect(ps, 3, jwt.token({ sub: "prober" }), conns);
    // Both pods queue 4: Standard's and Sheddable's limits reached, Critical's (8) not.
    for (const pod of ["cls-a", "cls-b"]) queueUpTo(ps, pod, 4);
    await waitForView(ps, list, "both pods to queue 4", (es) => es.every((e) => e.fresh && e.waiting === 4 && e.running === 1));

    // Debug on for both tokens (team=sre), so each refusal names the class it was served at.
    const basic = bearer(jwt.token({ tier: "basic", team: "sre" }));
    const premium = bearer(jwt.token({ tier: "premium", team: "sre" }));
    const debug = { "x-llm-debug": "1" };
    for (const w of workersOf(list)) {
      const c = idle(list, w);
      // Asking for Critical without the claim: the model's default applies.
      expectSaturated(await ask(c, LLAMA, { ...basic, ...debug, ...priority("critical") }), "standard");
      expectSaturated(await ask(c, "batch-lora", { ...basic, ...debug, ...priority("critical") }), "sheddable", "batch-lora");
      // A client's own copy of the claim header never counts (Envoy and the filter drop it).
      expectSaturated(
        await ask(c, LLAMA, { ...basic, ...debug, ...priority("critical"), "x-gateway-claim-critical": "premium" }),
        "standard",
      );
      // The claim alone does not make a request Critical: it must ask.
      expectSaturated(await ask(c, LLAMA, { ...premium, ...debug }), "standard");
      // A value that names no class.
      const bad = await ask(c, LLAMA, { ...premium, ...priority("urgent") });
      expect(bad.status).toBe(400);
      expect(bad.error).toMatchObject({ type: "invalid_request_error", param: "x-llm-priority" });
      // The claim, asking for Critical: admitted where the same request without the claim was refused.
      await hold(ps, idle(list, w), LLAMA, { ...premium, ...priority("critical") });
      await hold(ps, idle(list, w), "batch-lora", { ...premium, ...priority("critical") });
    }
    await expectStats(ps, {
      "llm_gateway.critical_downgraded_total": 6,
      "llm_gateway.class_admitted_total;class=critical": 4,
      "llm_gateway.class_refused_total;class=critical": 0,
      "llm_gateway.class_admitted_total;class=standard": 0,
      "llm_gateway.class_refused_total;class=standard": 6,
      "llm_gateway.class_admitted_total;class=sheddable": 0,
      "llm_gateway.class_refused_total;class=sheddable": 2,
      "llm_gateway.requests_refused_total;status=429;reason=pool_saturated": 8,
    });
  });
});

describe("a canary split", () => {
  // The virtual name is shorter than its targets, so the rewritten body is
  // longer than the one sent: content-length must follow, or the pod reads
  // a truncated body (Node parses exactly content-length bytes).
  const CANARY = "llama-chat";

  // Each request takes a few engine steps (4 tokens, 5 ms a step), so the
  // pods' running counts and KV usage change between scrapes and the
  // aggregator pushes new snapshots while the split runs, as in any live
  // fleet (with 1-token requests on 2 ms steps the pods look idle at most
  // scrapes and the view hardly changes). The split must hold through them.
  it("lands 90/10 within 5 points over 1000 requests from both workers, the pods reading the rewritten model", async () => {
    const quick = { engineConfig: { stepOverheadMs: 5 } };
    const ps = await start(
      [
        { name: "llama31", baseModel: LLAMA, pods: [{ name: "c31-a", ...quick }, { name: "c31-b", ...quick }] },
        { name: "llama32", baseModel: LLAMA_NEXT, pods: [{ name: "c32-a", ...quick }] },
      ],
      {
        models: [{ name: CANARY, split: [{ model: LLAMA, weight: 90 }, { model: LLAMA_NEXT, weight: 10 }] }],
        aggregator: { scrapeIntervalMs: 20 },
        // The split is under test, not admission: on a loaded machine scrapes lag, and the
        // requests sent since the last one count against the queue limits until it lands.
        profiles: { latency: { admission: { enabled: false } } },
      },
    );
    // 4 connections per worker, each sending one request at a time.
    const list = await connect(ps, 4, "x", conns);
    await waitForView(ps, list, "every pod scraped", (es) => es.length === 3 && es.every((e) => e.fresh));
    const accepted = await acceptedPerWorker(ps);
    const installsBefore = (await gatewayStats(ps))["llm_gateway.snapshot_updates_total"] ?? 0;
    const TOTAL = 1000;
    let next = 0;
    const results: Array<{ worker: string; pod: string; parsed: string; model: string; status: number }> = [];
    await Promise.all(list.map(async (conn) => {
      while (next < TOTAL) {
        next++;
        const r = await ask(conn, CANARY, {}, 4);
        const parsed = r.headers.get("x-fake-parsed-model");
        results.push({
          worker: conn.worker,
          pod: r.headers.get("x-served-by") ?? "",
          parsed: parsed === null ? "" : decodeURIComponent(parsed),
          model: r.body?.model ?? "",
          status: r.status,
        });
      }
    }));
    expect(results.length).toBe(TOTAL);
    const failed = results.filter((r) => r.status !== 200);
    expect(failed.slice(0, 3), `${failed.length} failed`).toEqual([]);
    // Each pod read the target as the model, and it is a pod of the target's pool.
    for (const r of results) {
      expect([LLAMA, LLAMA_NEXT]).toContain(r.parsed);
      expect(r.model).toBe(r.parsed);
      expect(r.pod).toMatch(r.parsed === LLAMA ? /^c31-[ab]$/ : /^c32-a$/);
    }
    // The condition this case is about: the workers installed new snapshots during the run.
    const installs = ((await gatewayStats(ps))["llm_gateway.snapshot_updates_total"] ?? 0) - installsBefore;
    expect(installs, "snapshot installs during the run (both workers)").toBeGreaterThanOrEqual(50);

    const canaryShare = (rs: typeof results) => (100 * rs.filter((r) => r.parsed === LLAMA_NEXT).length) / rs.length;
    const perWorker = Object.fromEntries(workersOf(list).map((w) => {
      const rs = results.filter((r) => r.worker === w);
      return [w, { requests: rs.length, canaryPct: canaryShare(rs) }];
    }));
    const summary = JSON.stringify({ overallPct: canaryShare(results), perWorker, installs });
    expect(Math.abs(canaryShare(results) - 10), summary).toBeLessThanOrEqual(5);
    // Spread over both workers, each holding the split too.
    for (const w of Object.values(perWorker)) {
      expect(w.requests, summary).toBeGreaterThanOrEqual(TOTAL / 4);
      expect(Math.abs(w.canaryPct - 10), summary).toBeLessThanOrEqual(5);
    }
    // No connection was replaced on the way (the worker of each stayed known).
    const after = await acceptedPerWorker(ps);
    expect(Object.keys(after).reduce((n, w) => n + after[w] - (accepted[w] ?? 0), 0)).toBe(0);

    // The pods' own counts and the gateway's counters say the same.
    const submitted = submittedPerPod(ps);
    const toNext = results.filter((r) => r.parsed === LLAMA_NEXT).length;
    expect(submitted["c32-a"]).toBe(toNext);
    expect(submitted["c31-a"] + submitted["c31-b"]).toBe(TOTAL - toNext);
    await expectStats(ps, {
      [`llm_gateway.canary_served_total;model=${CANARY};target=${LLAMA}`]: TOTAL - toNext,
      [`llm_gateway.canary_served_total;model=${CANARY};target=${LLAMA_NEXT}`]: toNext,
      "llm_gateway.class_admitted_total;class=standard": TOTAL,
    });
  }, 45_000);
});

describe("model-name routes", () => {
  it("are chosen after the filter set x-gateway-model-name: one model rate-limited, one with a timeout, another in the same pool unaffected", async () => {
    const ps = await start(
      [{ name: "llama", baseModel: LLAMA, adapters: ["sql-lora", "slow-lora"], pods: [{ name: "route-a" }, { name: "route-b" }] }],
      {
        models: [
          { name: LLAMA, route: { rateLimit: { requestsPerS: 1, burst: 2 } } },
          { name: "slow-lora", route: { timeoutMs: 300 } },
        ],
      },
    );
    const list = await connect(ps, 1, "x", conns);
    await waitForView(ps, list, "every pod scraped", (es) => es.every((e) => e.fresh));
    const podsGot = () => Object.values(submittedPerPod(ps)).reduce((a, b) => a + b, 0);

    // Quick requests for the rate-limited model from both workers: the
    // bucket (burst 2, one token a second, shared by the workers) lets
    // the first two through; the rest are Envoy's 429, in OpenAI format,
    // but for a token a second. Sent until three are refused: how many pass
    // before that depends on how fast the machine sends them.
    const t0 = Date.now();
    const limited: Reply[] = [];
    const refusedOf = (rs: number[]) => rs.filter((s) => s === 429).length;
    for (let i = 0; i < 30 && refusedOf(limited.map((r) => r.status)) < 3; i++) limited.push(await ask(list[i % 2], LLAMA));
    const elapsedS = (Date.now() - t0) / 1000;
    const statuses = limited.map((r) => r.status);
    expect(statuses.slice(0, 2), JSON.stringify(statuses)).toEqual([200, 200]);
    expect(statuses.filter((s) => s === 200).length, JSON.stringify({ statuses, elapsedS })).toBeLessThanOrEqual(2 + Math.ceil(elapsedS));
    expect(refusedOf(statuses), JSON.stringify({ statuses, elapsedS })).toBe(3);
    for (const r of limited.filter((x) => x.status === 429)) {
      expect(r.error).toMatchObject({ type: "rate_limit_error", code: "rate_limit_exceeded" });
      expect(r.headers.get("retry-after")).toBe("1");
    }
    // A refused one never reached a pod.
    expect(podsGot()).toBe(statuses.filter((s) => s === 200).length);

    // The same pool, another model: its own (the pool's) route, no limit, even
    // when the client claims the limited model's name in the header the route
    // matches (the client's copy is removed; the filter sets the real one).
    for (let i = 0; i < 6; i++) {
      const headers = i % 2 === 0 ? {} : { "x-gateway-model-name": LLAMA };
      const r = await ask(list[i % 2], "sql-lora", headers);
      expect(r.status, JSON.stringify(r.error)).toBe(200);
    }
    // And the limited model stays limited whatever name the client puts there
    // (the bucket has refilled meanwhile: up to its burst passes first).
    const t1 = Date.now();
    const spoofed: number[] = [];
    for (let i = 0; i < 30 && refusedOf(spoofed) < 2; i++) spoofed.push((await ask(list[i % 2], LLAMA, { "x-gateway-model-name": "sql-lora" })).status);
    const spoofedS = (Date.now() - t1) / 1000;
    expect(refusedOf(spoofed), JSON.stringify(spoofed)).toBe(2);
    expect(spoofed.filter((s) => s === 200).length, JSON.stringify({ spoofed, spoofedS })).toBeLessThanOrEqual(2 + Math.ceil(spoofedS));
    const refused = [...statuses, ...spoofed].filter((s) => s === 429).length;
    const stats = await ps.envoy.stats("http_local_rate_limit\\.rate_limited");
    expect(stats[`llm_gateway_model_${statSegment(LLAMA)}.http_local_rate_limit.rate_limited`]).toBe(refused);

    // The timeout route: slow-lora's whole response is bounded by 300 ms,
    // the same request for sql-lora (same pool, pool route: no timeout) is not.
    // 60 output tokens at >= 10 ms a step (after a 200 ms adapter load the first time): >= 0.6 s.
    for (const w of [0, 1]) {
      const slow = await ask(list[w], "slow-lora", {}, 60);
      expect(slow.status, JSON.stringify(slow.body ?? slow.error)).toBe(504);
      expect(slow.error).toMatchObject({ type: "upstream_error", code: "upstream_timeout" });
      const same = await ask(list[w], "sql-lora", {}, 60);
      expect(same.status).toBe(200);
      expect(same.body.usage.completion_tokens).toBe(60);
    }
  });
});

describe("debug output", () => {
  it("explains the decision only to a token with the claim that asks; pods never see the claim headers", async () => {
    jwt = makeJwt();
    const pods = ["dbg-a", "dbg-b", "dbg-c"];
    const ps = await start([{ name: "llama", baseModel: LLAMA, pods: pods.map((name) => ({ name })) }], {
      gateway: { jwt: jwt.config },
      traffic: { critical: { claim: "tier", values: ["premium"] }, debug: { claim: "team", values: ["sre"] } },
      recordHeaders: true,
    });
    const list = await connect(ps, 1, jwt.token({ sub: "prober" }), conns);
    // dbg-a runs 4 long requests: its running score is lower, and the explanation must show it.
    ps.fleet.pod("dbg-a").injectLoad({ requests: 4, promptTokens: 64, maxTokens: 4000 });
    await waitForView(ps, list, "dbg-a to run 4", (es) =>
      es.length === 3 && es.every((e) => e.fresh) && es.find((e) => e.address === ps.addressOf("dbg-a"))!.running === 4);

    const sre = bearer(jwt.token({ team: "sre", tier: "premium" }));
    const dev = bearer(jwt.token({ team: "dev", tier: "premium" }));
    const explain = { "x-llm-debug": "1" };
    const addresses = pods.map((p) => ps.addressOf(p));
    let explained = 0;
    let sent = 0;
    const decisionsForPods: string[] = [];
    for (const c of list) {
      // The allowed client, asking: the chosen pod, the fallbacks, every scorer per candidate.
      for (const cls of ["critical", "standard"]) {
        const r = await ask(c, LLAMA, { ...sre, ...explain, ...priority(cls) });
        sent++;
        explained++;
        expect(r.status).toBe(200);
        const decision = r.headers.get("x-gateway-decision") ?? "";
        decisionsForPods.push(decision);
        const m = /^pod=([^;]+); fallbacks=([^;]*); model=([^;]+); class=([^;]+); profile=([^;]+); scores=(.*)$/.exec(decision);
        expect(m, decision).not.toBeNull();
        const [, pod, fallbacks, model, klass, profile, scores] = m!;
        // It names the pod that served.
        expect(ps.podAt(pod), decision).toBe(r.headers.get("x-served-by"));
        expect(pod).not.toBe(ps.addressOf("dbg-a"));
        expect(new Set([pod, ...fallbacks.split(",")])).toEqual(new Set(addresses));
        expect([model, klass, profile]).toEqual([LLAMA, cls, "latency"]);
        const entries = [...scores.matchAll(
          /(\S+)\(queue=(-?[\d.]+),kvCache=(-?[\d.]+),running=(-?[\d.]+),lora=(-?[\d.]+),prefix=(-?[\d.]+),total=(-?[\d.]+)\)/g,
        )].map((x) => ({ address: x[1], parts: x.slice(2, 7).map(Number), total: Number(x[7]) }));
        expect(entries.map((e) => e.address), decision).toEqual([pod, ...fallbacks.split(",")]);
        for (let k = 0; k < entries.length; k++) {
          const e = entries[k];
          expect(Math.abs(e.parts.reduce((a, b) => a + b, 0) - e.total), decision).toBeLessThanOrEqual(0.03);
          if (k > 0) expect(e.total, decision).toBeLessThanOrEqual(entries[k - 1].total);
        }
        const busy = entries.find((e) => e.address === ps.addressOf("dbg-a"))!;
        expect(busy.parts[2], decision).toBeLessThan(entries[0].parts[2]);
      }
      // Everyone else: nothing.
      const quiet: Record<string, Record<string, string>> = {
        "may, did not ask": { ...sre },
        "asked, may not": { ...dev, ...explain },
        // A client's own claim header counts for nothing, nor does its own decision header.
        "asked, may not, own claim header": { ...dev, ...explain, "x-gateway-claim-debug": "sre" },
        "own decision header": { ...dev, "x-gateway-decision": "pod=10.9.9.9:1" },
      };
      for (const [label, headers] of Object.entries(quiet)) {
        const r = await ask(c, LLAMA, headers);
        sent++;
        expect(r.status, label).toBe(200);
        expect(r.headers.get("x-gateway-decision"), label).toBeNull();
      }
    }
    expect(workersOf(list).length).toBe(2);

    // What the pods received: every request, none with a claim header, and a
    // decision header only on the explained ones (the filter's, not a client's).
    const seen = [...ps.seen.values()].flat();
    expect(seen.length).toBe(sent);
    for (const h of seen) {
      expect(Object.keys(h).filter((k) => k.startsWith("x-gateway-claim-")), JSON.stringify(h)).toEqual([]);
      expect(h["x-gateway-model-name"]).toBe(LLAMA);
    }
    const withDecision = seen.map((h) => h["x-gateway-decision"]).filter((d) => d !== undefined);
    expect(withDecision.length).toBe(explained);
    expect(new Set(withDecision)).toEqual(new Set(decisionsForPods));
    // Picks per pod in Envoy's stats match what each pod received.
    const expected: Record<string, number> = {};
    for (const p of pods) expected[`llm_gateway.pod_picks_total;pool=llama;model_server=${ps.addressOf(p)}`] = ps.seen.get(p)!.length;
    expect(expected[`llm_gateway.pod_picks_total;pool=llama;model_server=${ps.addressOf("dbg-a")}`]).toBe(0);
    await expectStats(ps, { ...expected, "llm_gateway.class_admitted_total;class=critical": 2, "llm_gateway.critical_downgraded_total": 0 });
  });
});
