// Holding requests in Envoy while a pool has no room, through a real Envoy
// with two workers: held requests are released in class order as room frees
// (their pod chosen then), fairly between tenants, a client that leaves
// frees its place at once, a request past its wait budget gets 429 with a
// computed Retry-After, an idle pool holds nothing, and what is held stays
// within the queued-bytes bound.
//
// Room is made and freed by hand: the pods run one sequence at a time
// (maxNumSeqs 1) and long injected requests (4,000 tokens, ~40 s) fill them;
// aborting those frees the pod, and the held requests (1 token each) then
// pass through it one after another, in the order the gateway released them
// (seen in the order the pod's recording proxy received them).
import OpenAI from "openai";
import { afterEach, describe, expect, it } from "vitest";
import type { FleetPool } from "../../testing/launcher/stack.js";
import { waitFor } from "../helpers/stack.js";
import { connect, type Conn } from "../helpers/connections.js";
import { gatewayStats, startTrafficStack, waitForView, type TrafficOptions, type TrafficStack } from "../helpers/traffic.js";

const LLAMA = "llama-3.1-8b";

let stack: TrafficStack | null = null;
const conns: Conn[] = [];
const pending: AbortController[] = [];

afterEach(async () => {
  for (const ac of pending.splice(0)) ac.abort();
  for (const c of conns.splice(0)) c.agent.destroy();
  await stack?.close();
  stack = null;
});

/** Queue limits Sheddable 0.5, Standard 1, Critical 2 per pod; budgets long enough that nothing here expires unless a case says so. */
const latency = (admission: Record<string, number> = {}) => ({
  latency: { admission: { maxWaiting: 1, waitCriticalMs: 60_000, waitStandardMs: 60_000, waitSheddableMs: 60_000, ...admission } },
});

async function start(opts: TrafficOptions = {}, maxNumSeqs = 1): Promise<TrafficStack> {
  const pool: FleetPool = { name: "llama", baseModel: LLAMA, pods: [{ name: "q-a", engineConfig: { maxNumSeqs } }] };
  stack = await startTrafficStack([pool], { recordHeaders: true, profiles: latency(), ...opts });
  return stack;
}

interface Answer {
  status: number;
  headers: Headers;
  error: any;
}

/** A chat completion whose answer is awaited later; its tag travels in a header the pod's proxy records. */
function send(conn: Conn, tag: string, headers: Record<string, string> = {}, content = "Say hello"): Promise<Answer> {
  const ac = new AbortController();
  pending.push(ac);
  conn.busy = true;
  return conn.client.chat.completions
    .create({ model: LLAMA, messages: [{ role: "user", content: `${content} (${tag})` }], max_tokens: 1 }, {
      headers: { "x-test-tag": tag, ...headers },
      signal: ac.signal,
    })
    .withResponse()
    .then(
      ({ response }) => ({ status: response.status, headers: response.headers, error: null }),
      (err: unknown) => {
        if (err instanceof OpenAI.APIError && err.status !== undefined && err.headers) return { status: err.status, headers: err.headers, error: err.error };
        return { status: 0, headers: new Headers(), error: String(err) };
      },
    )
    .finally(() => (conn.busy = false));
}

/** Tags of the requests the pod received so far, in order. */
const received = (ps: TrafficStack): string[] =>
  (ps.seen.get("q-a") ?? []).map((h) => String(h["x-test-tag"] ?? "")).filter((t) => t !== "");

/** Fills the pod: one long request running and `waiting` behind it. */
function fill(ps: TrafficStack, waiting: number): void {
  ps.fleet.pod("q-a").injectLoad({ requests: waiting + 1, promptTokens: 64, maxTokens: 4000 });
}

/** Aborts every injected request: the pod is free, and what the gateway releases runs one by one. */
function drain(ps: TrafficStack): void {
  const pod = ps.fleet.pod("q-a");
  for (let i = 0; i < 64; i++) pod.driver.abort(`load-q-a-${i}`);
}

async function heldCount(ps: TrafficStack): Promise<number> {
  const stats = await gatewayStats(ps);
  return ["critical", "standard", "sheddable"].reduce((n, c) => n + (stats[`llm_gateway.class_held_total;class=${c}`] ?? 0), 0);
}

/** The requests held per worker now, as their gauges say. */
async function heldGauges(ps: TrafficStack): Promise<{ requests: number; bytes: number }> {
  const stats = await gatewayStats(ps);
  let requests = 0;
  let bytes = 0;
  for (const [k, v] of Object.entries(stats)) {
    if (k.startsWith("llm_gateway.requests_held;")) requests += v;
    if (k.startsWith("llm_gateway.requests_held_bytes;")) bytes += v;
  }
  return { requests, bytes };
}

async function saturated(ps: TrafficStack, list: Conn[], waiting = 3): Promise<void> {
  fill(ps, waiting);
  await waitForView(ps, list, `the pod to queue ${waiting}`, (es) => es.every((e) => e.fresh && e.waiting >= waiting));
}

const byWorker = (list: Conn[]) => {
  const workers = [...new Set(list.map((c) => c.worker))];
  expect(workers.length).toBe(2);
  return workers.map((w) => list.filter((c) => c.worker === w));
};

describe("holding requests in the gateway", () => {
  it("holds what a saturated pool has no room for and releases it in class order, Critical first, as room frees", async () => {
    const ps = await start({ traffic: { critical: "any" } });
    const list = await connect(ps, 4, "x", conns);
    await saturated(ps, list);
    const [a, b] = byWorker(list);
    // Interleaved over both workers, the lowest class first: arrival order is the reverse of the class order.
    const answers: Promise<Answer>[] = [];
    const plan: Array<[string, string]> = [
      ["sheddable", "d1"], ["sheddable", "d2"], ["standard", "s1"], ["standard", "s2"], ["critical", "c1"], ["critical", "c2"],
    ];
    for (const [i, [cls, tag]] of plan.entries()) {
      answers.push(send((i % 2 === 0 ? a : b)[i >> 1], tag, { "x-llm-priority": cls }));
      await waitFor(`${tag} to be held`, async () => (await heldCount(ps)) === i + 1);
    }
    expect(received(ps)).toEqual([]);
    expect((await heldGauges(ps)).requests).toBe(6);

    drain(ps);
    const results = await Promise.all(answers);
    expect(results.map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 200]);
    // The classes in order. (The two of a class are released by different workers a tick apart,
    // and may reach the pod in either order: each worker opens its own connection to it.)
    const got = received(ps);
    expect(got.map((t) => t[0]), got.join(",")).toEqual(["c", "c", "s", "s", "d", "d"]);
    await waitFor("the held gauges to fall to 0", async () => (await heldGauges(ps)).requests === 0);
  });

  it("shares a class between tenants: one tenant's flood does not delay another's requests beyond its fair share", async () => {
    const ps = await start({ traffic: { tenant: "header" } });
    const list = await connect(ps, 5, "x", conns);
    await saturated(ps, list);
    const [a, b] = byWorker(list);
    const answers: Promise<Answer>[] = [];
    // Eight from the flooding tenant, then two from another, over both workers.
    const order = [...Array.from({ length: 8 }, (_, i) => ["flood", `f${i + 1}`]), ["trickle", "t1"], ["trickle", "t2"]];
    for (const [i, [tenant, tag]] of order.entries()) {
      answers.push(send((i % 2 === 0 ? a : b)[i >> 1], tag, { "x-llm-tenant": tenant }));
      await waitFor(`${tag} to be held`, async () => (await heldCount(ps)) === i + 1);
    }
    drain(ps);
    expect((await Promise.all(answers)).every((r) => r.status === 200)).toBe(true);
    const got = received(ps);
    expect(got).toHaveLength(10);
    // With two tenants waiting, each gets every other release: both of the trickle's are among the first four.
    expect(got.indexOf("t1"), got.join(",")).toBeLessThan(4);
    expect(got.indexOf("t2"), got.join(",")).toBeLessThan(4);
  });

  it("lets a client that disconnects while held leave the queue at once: its place goes to the next one", async () => {
    const ps = await start();
    const list = await connect(ps, 2, "x", conns);
    await saturated(ps, list);
    const [a, b] = byWorker(list);
    const leaving = send(a[0], "gone");
    await waitFor("the first to be held", async () => (await heldCount(ps)) === 1);
    const staying = send(b[0], "stays");
    await waitFor("the second to be held", async () => (await heldCount(ps)) === 2);
    pending[0].abort();
    expect((await leaving).status).toBe(0);
    await waitFor("the held count to fall to 1", async () => (await heldGauges(ps)).requests === 1);
    expect((await gatewayStats(ps))["llm_gateway.class_held_abandoned_total;class=standard"]).toBe(1);
    drain(ps);
    expect((await staying).status).toBe(200);
    expect(received(ps)).toEqual(["stays"]);
  });

  it("refuses a request whose wait runs past its budget with 429 and a Retry-After of at most 60 s; a client's header tightens the budget", async () => {
    const ps = await start({ profiles: latency({ waitStandardMs: 1_500 }), traffic: { debug: "all" } });
    const list = await connect(ps, 2, "x", conns);
    await saturated(ps, list);
    const [a, b] = byWorker(list);
    const started = performance.now();
    const late = await send(a[0], "late");
    expect(late.status).toBe(429);
    expect(performance.now() - started).toBeGreaterThanOrEqual(1_400);
    expect(late.error).toMatchObject({ type: "rate_limit_error", code: "pool_saturated" });
    const retryAfter = Number(late.headers.get("retry-after"));
    expect(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 60).toBe(true);
    expect(late.headers.get("x-gateway-decision")).toContain("refused=wait_budget_exceeded; pool=llama; class=standard;");

    // A budget of 0 from the client: refused at once, never held.
    const impatient = await send(b[0], "impatient", { "x-llm-max-wait-ms": "0" });
    expect(impatient.status).toBe(429);
    const bad = await send(b[0], "bad", { "x-llm-max-wait-ms": "soon" });
    expect(bad.status).toBe(400);
    expect(bad.error).toMatchObject({ type: "invalid_request_error", param: "x-llm-max-wait-ms" });
    expect(await heldCount(ps)).toBe(1);
    expect(received(ps)).toEqual([]);
  });

  it("holds nothing while a pool has room", async () => {
    // Sixteen sequences at a time: the six requests of a round all start at once.
    const ps = await start({}, 16);
    const list = await connect(ps, 3, "x", conns);
    await waitForView(ps, list, "the pod to be fresh", (es) => es.every((e) => e.fresh));
    for (let round = 0; round < 3; round++) {
      const answers = await Promise.all(list.map((c, i) => send(c, `r${round}-${i}`)));
      expect(answers.map((r) => r.status)).toEqual(list.map(() => 200));
    }
    expect(await heldCount(ps)).toBe(0);
    expect(received(ps)).toHaveLength(3 * list.length);
  });

  it("keeps what it holds within the queued-bytes bound and refuses past it at once", async () => {
    const bound = 6_000;
    const ps = await start({ traffic: { queue: { maxBytesPerWorker: bound, maxRequestsPerWorker: 100 } }, ...{ profiles: latency() } });
    const list = await connect(ps, 4, "x", conns);
    await saturated(ps, list);
    const [a] = byWorker(list);
    const big = "x".repeat(2_500);
    const held = [send(a[0], "k1", {}, big), send(a[1], "k2", {}, big)];
    await waitFor("two to be held", async () => (await heldCount(ps)) === 2);
    const started = performance.now();
    const over = await send(a[2], "k3", {}, big);
    expect(over.status).toBe(429);
    expect(performance.now() - started).toBeLessThan(1_400);
    await waitFor("the gauges to show both", async () => (await heldGauges(ps)).requests === 2);
    const gauges = await heldGauges(ps);
    expect(gauges.bytes).toBeGreaterThan(5_000);
    expect(gauges.bytes).toBeLessThanOrEqual(bound);
    drain(ps);
    expect((await Promise.all(held)).map((r) => r.status)).toEqual([200, 200]);
  });
});
