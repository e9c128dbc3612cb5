// Holding requests in the routing core, on the native build: what finds no
// room is held and released when room frees, onto the pod that has room
// then; classes in order, tenants fairly, workers in one order; refused
// only past the budget, when the hold is full, or when the budget runs out.
import { beforeEach, describe, expect, it } from "vitest";
import { NativeRouter, type HeldResult, type PumpEvent, type RouteOptions, type RouteResult } from "../../testing/native/router.js";
import { NativeSharedData } from "../../testing/native/shared-data.js";
import type { AdmissionMsg, EndpointMsg, SnapshotMsg } from "../../host/proto.js";
import { endpoint, pool } from "../../testing/fixtures/snapshot-builders.js";

const A = "10.0.0.1:80";
const B = "10.0.0.2:80";

/** Limits per pod: Sheddable 0.5, Standard 1, Critical 2 requests ahead. */
const ADMIT: AdmissionMsg = {
  enabled: true, maxWaiting: 1, maxKvCache: 0.95, sheddableFactor: 0.5, criticalFactor: 2, maxRetryAfterS: 60,
  waitCriticalMs: 60_000, waitStandardMs: 30_000, waitSheddableMs: 10_000,
};
const WEIGHTS = { queue: 2, kvCache: 1, running: 1, lora: 0, prefix: 0 };

/** A pod whose batch of 4 is full and which queues `waiting` behind it. */
const busy = (waiting: number): Partial<EndpointMsg> => ({ running: 4, batchSlots: 4, waiting });
/** A pod with free slots. */
const free: Partial<EndpointMsg> = { running: 0, batchSlots: 4, waiting: 0 };

let version = 0;
function fleet(a: Partial<EndpointMsg>, b: Partial<EndpointMsg>, admission: Partial<AdmissionMsg> = {}): SnapshotMsg {
  return {
    version: ++version,
    generatedUnixMs: 0,
    pools: [pool("p", "llama", [endpoint(A, a), endpoint(B, b)], WEIGHTS)],
    profiles: [{ name: "latency", weights: WEIGHTS, admission: { ...ADMIT, ...admission } }],
    models: [{ name: "llama", pool: 0, adapter: "", profile: 0, priority: "STANDARD", splits: [] }],
  } as SnapshotMsg;
}

let sent = 0;
const chat = (text = "hi") => JSON.stringify({ model: "llama", messages: [{ role: "user", content: `${text} ${sent++}` }] });

let workers: NativeRouter[];
let shared: NativeSharedData;
let now = 1_000;
let nextId = 1;

beforeEach(async () => {
  workers ??= await Promise.all([NativeRouter.load(), NativeRouter.load()]);
  workers.forEach((w, i) => {
    w.reset(7 + i);
    w.setWriter(i + 1);
  });
  shared = new NativeSharedData();
  now = 1_000;
  nextId = 1;
  clock();
});

function clock(): void {
  for (const w of workers) w.setClock(now, now);
}

function advance(ms: number): void {
  now += ms;
  clock();
}

function install(snap: SnapshotMsg): void {
  for (const w of workers) shared.install(w, snap);
}

/** A request on worker `w` that may be held; its hold id is returned with the result. */
function send(options: RouteOptions = {}, w = 0, body = chat()): { id: number; result: RouteResult | HeldResult } {
  const id = nextId++;
  return { id, result: shared.routeOrHold(workers[w], body, "chat", { holdId: id, ...options }) };
}

function held(r: { id: number; result: RouteResult | HeldResult }): number {
  expect(r.result, JSON.stringify(r.result)).toHaveProperty("held", r.id);
  return r.id;
}

/** Every worker's tick, in worker order: the held requests each releases or refuses. */
function tick(): PumpEvent[] {
  return workers.flatMap((w) => shared.pump(w));
}

const ids = (events: PumpEvent[]) => events.map((e) => e.id);
const released = (events: PumpEvent[]) => events.filter((e): e is Extract<PumpEvent, { endpoint: string | null }> => "endpoint" in e);

describe("holding requests", () => {
  it("holds what finds no room and releases it when room frees, onto the pod that has room then", () => {
    install(fleet(busy(2), busy(2)));
    const first = held(send());
    expect(tick()).toEqual([]);
    // B frees up: the request goes there, though A looked as good when it arrived.
    install(fleet(busy(2), free));
    const out = tick();
    expect(ids(out)).toEqual([first]);
    expect(released(out)[0].endpoint).toBe(B);
    expect(workers[0].heldCount()).toBe(0);
  });

  it("routes at once, holding nothing, while a pod has room", () => {
    install(fleet(free, busy(2)));
    const r = send();
    expect(r.result).toMatchObject({ endpoint: A });
    expect(workers[0].heldCount()).toBe(0);
  });

  it("releases Critical before Standard before Sheddable, each class in order of arrival", () => {
    install(fleet(busy(3), busy(3)));
    const order = ["sheddable", "standard", "critical", "sheddable", "standard", "critical"];
    const byClass = new Map<string, number[]>();
    for (const priority of order) {
      const id = held(send({ priority, mayClaimCritical: true }));
      byClass.set(priority, [...(byClass.get(priority) ?? []), id]);
    }
    install(fleet(free, free));
    const releasedIds: number[] = [];
    for (let i = 0; i < 10 && releasedIds.length < order.length; i++) {
      const out = released(tick());
      releasedIds.push(...ids(out));
      // What was sent finishes before the next tick: room for the next.
      for (const e of out) shared.release(workers[0], e.endpoint!);
      advance(20);
    }
    expect(releasedIds).toEqual([...byClass.get("critical")!, ...byClass.get("standard")!, ...byClass.get("sheddable")!]);
  });

  it("shares a class between tenants: a flood does not delay another tenant's requests beyond its turn", () => {
    install(fleet(busy(3), busy(3)));
    const flood = Array.from({ length: 8 }, () => {
      advance(1);
      return held(send({ tenant: "flood" }));
    });
    advance(1);
    const trickle = held(send({ tenant: "trickle" }));
    install(fleet(free, busy(3)));
    const releasedIds: number[] = [];
    for (let i = 0; i < 20 && releasedIds.length < 9; i++) {
      const out = released(tick());
      releasedIds.push(...ids(out));
      for (const e of out) shared.release(workers[0], e.endpoint!);
      advance(20);
    }
    expect(releasedIds).toHaveLength(9);
    // Its tag is its arrival, the flood's run a release apart ahead of the clock: it goes second, not ninth.
    expect(releasedIds.indexOf(trickle)).toBe(1);
    expect(releasedIds.filter((id) => id !== trickle)).toEqual(flood);
  });

  it("keeps one order over two workers: a worker does not release its request before an earlier one another holds", () => {
    install(fleet(busy(3), busy(3)));
    const older = held(send({}, 1));
    advance(5);
    const newer = held(send({}, 0));
    // Room for one: worker 0 ticks first but its request came later, so worker 1's goes.
    install(fleet({ running: 3, batchSlots: 4, waiting: 0 }, busy(3)));
    const out = tick();
    expect(ids(out)).toEqual([older]);
    shared.release(workers[1], released(out)[0].endpoint!);
    advance(20);
    expect(ids(tick())).toEqual([newer]);
  });

  it("refuses at once what would wait past its budget, with a Retry-After that grows with what is held ahead", () => {
    // With no completions seen, the pool is taken to drain 1 request a second per pod: 2 a second.
    install(fleet(busy(3), busy(3), { waitStandardMs: 2_000 }));
    const retryAfters: number[] = [];
    let refused = 0;
    for (let i = 0; i < 12; i++) {
      const r = send();
      if ("status" in r.result) {
        refused++;
        expect(r.result.status).toBe(429);
        expect(r.result.error.code).toBe("pool_saturated");
        retryAfters.push(r.result.retryAfterS!);
      }
    }
    // Four fit in 2 s at 2 a second (the fifth would wait 2 s: still in), the rest are refused.
    expect(workers[0].heldCount()).toBe(5);
    expect(refused).toBe(7);
    for (let i = 1; i < retryAfters.length; i++) expect(retryAfters[i]).toBeGreaterThanOrEqual(retryAfters[i - 1]);
    expect(retryAfters[0]).toBeGreaterThanOrEqual(3);
    expect(retryAfters.at(-1)!).toBeLessThanOrEqual(60);
  });

  it("estimates one wait over two workers: each counts the other's held requests and drain, so both refuse alike", () => {
    // No completions seen: each worker takes its share of the pool to drain 1 a second per pod, 2 a second.
    install(fleet(busy(3), busy(3)));
    for (const w of [0, 1, 0, 1]) held(send({}, w));
    // Four held ahead on the two workers, drained at 2 + 2 a second: a 1-s wait, past a 500-ms budget.
    const refusals = [0, 1].map((w) => send({ maxWaitMs: 500, explain: true }, w).result as Extract<RouteResult, { status: number }>);
    for (const r of refusals) {
      expect(r).toMatchObject({ status: 429, retryAfterS: 2 });
      expect(r.explanation).toContain("held_ahead=4; predicted_wait_ms=1000;");
    }
    // The same request within its budget is held on either.
    held(send({ maxWaitMs: 1_500 }, 1));
  });

  it("refuses a held request once its budget has run out, and a client's own budget is tighter", () => {
    install(fleet(busy(3), busy(3)));
    const patient = held(send());
    const hurried = held(send({ maxWaitMs: 500 }));
    advance(400);
    expect(tick()).toEqual([]);
    advance(200);
    const out = tick();
    expect(ids(out)).toEqual([hurried]);
    expect(out[0]).toMatchObject({ status: 429, error: { code: "pool_saturated" } });
    advance(30_000);
    expect(ids(tick())).toEqual([patient]);
    // A budget of 0 asks to be refused rather than held.
    expect(send({ maxWaitMs: 0 }).result).toMatchObject({ status: 429 });
  });

  it("lets a cancelled request leave at once: the next one takes its place", () => {
    install(fleet(busy(3), busy(3)));
    const gone = held(send());
    const next = held(send());
    expect(shared.cancel(workers[0], gone)).toBe(true);
    expect(shared.cancel(workers[0], gone)).toBe(false);
    install(fleet({ running: 3, batchSlots: 4, waiting: 0 }, busy(3)));
    expect(ids(tick())).toEqual([next]);
  });

  it("refuses at once when the worker's hold is full", () => {
    install(fleet(busy(3), busy(3)));
    const body = chat("x".repeat(1_000));
    workers[0].setHoldLimits({ maxBytes: 2 * body.length + 10, maxRequests: 100 });
    held(send({}, 0, body));
    held(send({}, 0, chat("x".repeat(1_000))));
    expect(send({}, 0, chat("x".repeat(1_000))).result).toMatchObject({ status: 429 });
    workers[0].setHoldLimits({ maxBytes: 1 << 26, maxRequests: 2 });
    expect(send().result).toMatchObject({ status: 429 });
  });

  it("treats held requests as new ones once the view is too old: routed blind (fail open), or 503 (reject)", () => {
    install(fleet(busy(3), busy(3)));
    const open = held(send());
    // The aggregator falls silent past the view's age bound (3 s by default).
    now += 5_000;
    for (const w of workers) w.setClock(now, now - 5_000);
    const out = tick();
    expect(ids(out)).toEqual([open]);
    expect(out[0]).toHaveProperty("endpoint");

    for (const w of workers) w.setViewPolicy(3_000, "reject");
    clock();
    const rejected = held(send());
    now += 5_000;
    for (const w of workers) w.setClock(now, now - 5_000);
    expect(tick()).toEqual([expect.objectContaining({ id: rejected, status: 503, error: expect.objectContaining({ code: "no_endpoint" }) })]);
    for (const w of workers) w.setViewPolicy(3_000, "fail-open");
  });

  it("holds a retry that came back as told even past its budget, ahead of what arrived since", () => {
    install(fleet(busy(3), busy(3), { waitStandardMs: 1_000 }));
    // At 2 a second, the three held ones fill the budget.
    for (let i = 0; i < 3; i++) held(send());
    const body = chat();
    const refused = send({}, 0, body).result as Extract<RouteResult, { status: number }>;
    expect(refused.status).toBe(429);
    advance(refused.retryAfterS! * 1_000);
    // The three held ones ran out meanwhile, each told when to come back; once
    // those turns have passed (their clients gave up), new work arrives.
    expect(tick().every((e) => "status" in e)).toBe(true);
    advance(2_000);
    const fresh = held(send());
    const retry = held(send({}, 0, body));
    install(fleet({ running: 3, batchSlots: 4, waiting: 0 }, busy(3)));
    expect(ids(tick())).toEqual([retry, fresh]);
  });
});
