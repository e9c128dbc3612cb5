// Traffic management in the routing core, on the native build: admission and
// its class ladder, who may claim Critical, Retry-After from the drain rate,
// per-model profiles, canary splits, explained decisions.
import { beforeEach, describe, expect, it } from "vitest";
import { NativeRouter, type RouteOptions, type RouteResult } from "../../testing/native/router.js";
import { NativeSharedData } from "../../testing/native/shared-data.js";
import type { AdmissionMsg, EndpointMsg, SnapshotMsg } from "../../host/proto.js";
import { endpoint, pool } from "../../testing/fixtures/snapshot-builders.js";

const A = "10.0.0.1:80";
const B = "10.0.0.2:80";
const C = "10.0.0.3:80";

const ADMIT: AdmissionMsg = { enabled: true, maxWaiting: 4, maxKvCache: 0.95, sheddableFactor: 0.5, criticalFactor: 2, maxRetryAfterS: 60 };
const WEIGHTS = { queue: 2, kvCache: 1, running: 1, lora: 0, prefix: 0 };

/**
 * Pods whose batch is full, unless a test says otherwise: what they are sent
 * queues, so admission has something to judge.
 */
const FULL: Partial<EndpointMsg> = { running: 4, batchSlots: 4 };

/**
 * Pool p (llama, pods A and B, profile "latency") and pool q (llama-v2, pod C,
 * profile "open": admission off); "batch" is a sheddable adapter of llama;
 * "llama-canary" splits 90/10 between llama and llama-v2.
 */
function fleet(a: Partial<EndpointMsg>, b: Partial<EndpointMsg>, admission: Partial<AdmissionMsg> = {}): SnapshotMsg {
  return {
    version: 1,
    generatedUnixMs: 0,
    pools: [pool("p", "llama", [endpoint(A, { ...FULL, ...a }), endpoint(B, { ...FULL, ...b })], WEIGHTS), pool("q", "llama-v2", [endpoint(C, FULL)], WEIGHTS)],
    profiles: [
      { name: "latency", weights: WEIGHTS, admission: { ...ADMIT, ...admission } },
      { name: "open", weights: WEIGHTS, admission: { ...ADMIT, enabled: false } },
    ],
    models: [
      { name: "llama", pool: 0, adapter: "", profile: 0, priority: "STANDARD", splits: [] },
      { name: "llama-v2", pool: 1, adapter: "", profile: 1, priority: "STANDARD", splits: [] },
      { name: "batch", pool: 0, adapter: "batch", profile: 0, priority: "SHEDDABLE", splits: [] },
      { name: "llama-canary", pool: 0, adapter: "", profile: 0, priority: "CRITICAL", splits: [{ model: 0, weight: 90 }, { model: 1, weight: 10 }] },
    ],
  } as SnapshotMsg;
}

// Each body is new: a body the gateway refused and sees again is taken for its retry.
let sent = 0;
const chat = (model = "llama") => JSON.stringify({ model, messages: [{ role: "user", content: `hi ${sent++}` }] });

let router: NativeRouter;
let shared: NativeSharedData;
let now = 1_000;

beforeEach(async () => {
  router ??= await NativeRouter.load();
  router.reset(7);
  shared = new NativeSharedData();
  now = 1_000;
  router.setClock(now, now);
});

function install(snap: SnapshotMsg): void {
  shared.install(router, snap);
}

function route(options: RouteOptions = {}, model = "llama", body = chat(model)): RouteResult {
  return shared.route(router, body, "chat", options);
}

function admitted(result: RouteResult): string {
  if (!("endpoint" in result) || result.endpoint === null) throw new Error(`not routed: ${JSON.stringify(result)}`);
  return result.endpoint;
}

function advance(ms: number): void {
  now += ms;
  router.setClock(now, now);
}

describe("admission", () => {
  it("admits every class while some pod has room", () => {
    install(fleet({ waiting: 9 }, { waiting: 0 }));
    for (const priority of ["critical", "standard", "sheddable"]) {
      expect(admitted(route({ priority, mayClaimCritical: true }))).toBe(B);
      shared.release(router, B);
    }
  });

  it("refuses Sheddable first and Critical last (limits 2, 4 and 8 waiting per pod)", () => {
    install(fleet({ waiting: 3 }, { waiting: 3 }));
    const sheddable = route({ priority: "sheddable" });
    expect(sheddable).toMatchObject({ status: 429, error: { code: "pool_saturated", type: "rate_limit_error" } });
    expect(admitted(route({ priority: "standard" }))).toMatch(/10\.0\.0\.[12]:80/);

    install(fleet({ waiting: 7 }, { waiting: 7 }));
    expect(route({ priority: "standard" })).toMatchObject({ status: 429 });
    expect(admitted(route({ priority: "critical", mayClaimCritical: true }))).toMatch(/10\.0\.0\.[12]:80/);

    install(fleet({ waiting: 8 }, { waiting: 8 }));
    expect(route({ priority: "critical", mayClaimCritical: true })).toMatchObject({ status: 429 });
  });

  it("counts requests sent since the scrape: the queue fills up to the limit, then refuses", () => {
    install(fleet({ waiting: 0 }, { waiting: 0 }));
    let routed = 0;
    while (routed < 100 && "endpoint" in route()) routed++;
    // Each pod takes requests until its estimated queue reaches 4.
    expect(routed).toBe(8);
    shared.release(router, A);
    expect(admitted(route())).toBe(A);
  });

  it("refuses below Critical when the KV cache is nearly full and the pod already queues", () => {
    install(fleet({ waiting: 1, kvCacheUsage: 0.97 }, { waiting: 1, kvCacheUsage: 0.99 }));
    expect(route()).toMatchObject({ status: 429 });
    expect(admitted(route({ priority: "critical", mayClaimCritical: true }))).toMatch(/10\.0\.0\.[12]:80/);
    // A full cache with nothing queued still starts the next request at once.
    install(fleet({ waiting: 0, kvCacheUsage: 0.99 }, { waiting: 1, kvCacheUsage: 0.99 }));
    expect(admitted(route())).toBe(A);
  });

  it("holds a slow pod to the same queue limit as a fast one (a learned speed moves with what the pod holds)", () => {
    // B reads 0.4 of A's speed; both are judged against the limit of 4 waiting, so B's room admits
    // the request (the picker may still prefer the faster A: admission only says the pool has room).
    install(fleet({ waiting: 4, capacity: 10 }, { waiting: 2, capacity: 4 }));
    expect(admitted(route())).toMatch(/^10\.0\.0\.[12]:80$/);
    install(fleet({ waiting: 4, capacity: 10 }, { waiting: 4, capacity: 4 }));
    expect(route()).toMatchObject({ status: 429 });
  });

  it("never refuses on metrics it does not trust, nor when the profile turns admission off", () => {
    install(fleet({ waiting: 50, fresh: false }, { waiting: 50, fresh: false }));
    expect(admitted(route({ priority: "sheddable" }))).toMatch(/10\.0\.0\.[12]:80/);
    install(fleet({ waiting: 50 }, { waiting: 50 }, { enabled: false }));
    expect(admitted(route({ priority: "sheddable" }))).toMatch(/10\.0\.0\.[12]:80/);
  });
});

describe("classes", () => {
  it("serves the model's default class when none is asked for", () => {
    install(fleet({}, {}));
    expect(route({}, "batch")).toMatchObject({ class: "sheddable" });
    expect(route({})).toMatchObject({ class: "standard", downgraded: false });
    // Asking for a lower class is always allowed.
    expect(route({ priority: "SHEDDABLE" })).toMatchObject({ class: "sheddable" });
  });

  it("ignores a Critical claim from a client that may not make it, and says so", () => {
    install(fleet({ waiting: 5 }, { waiting: 5 }));
    const result = route({ priority: "critical", mayClaimCritical: false });
    // Served as Standard, whose limit (4) both pods have passed.
    expect(result).toMatchObject({ status: 429 });
    install(fleet({}, {}));
    expect(route({ priority: "critical" })).toMatchObject({ class: "standard", downgraded: true });
    expect(route({ priority: "critical", mayClaimCritical: true })).toMatchObject({ class: "critical", downgraded: false });
  });

  it("grants a model's Critical default only to clients that may claim Critical", () => {
    install(fleet({}, {}));
    // The claim gate is the one place that grants Critical: a model's default cannot go around it.
    expect(route({}, "llama-canary")).toMatchObject({ class: "standard", downgraded: true });
    expect(route({ mayClaimCritical: true }, "llama-canary")).toMatchObject({ class: "critical", downgraded: false });
    expect(route({ priority: "sheddable" }, "llama-canary")).toMatchObject({ class: "sheddable", downgraded: false });
  });

  it("answers a priority header that names no class with a 400", () => {
    install(fleet({}, {}));
    expect(route({ priority: "urgent" })).toMatchObject({ status: 400, error: { param: "x-llm-priority" } });
    expect(route({ priority: "" })).toMatchObject({ status: 400 });
  });
});

describe("Retry-After", () => {
  /** `perSecond` completions a second for `seconds`, the pool never short of room. */
  function drain(perSecond: number, seconds: number): void {
    install(fleet({ waiting: 0 }, { waiting: 0 }));
    for (let i = 0; i < perSecond * seconds; i++) {
      const pod = admitted(route());
      advance(Math.round(1000 / perSecond));
      shared.release(router, pod);
    }
  }

  function refusals(n: number): Array<{ retryAfterS: number; booked: number; drain: number }> {
    install(fleet({ waiting: 6 }, { waiting: 6 }));
    return Array.from({ length: n }, () => {
      const r = route({ explain: true });
      if (!("retryAfterS" in r) || r.retryAfterS === undefined) throw new Error(JSON.stringify(r));
      const [, booked, drain] = /booked_retries=(\d+); drain_per_s=([\d.]+)/.exec(r.explanation!)!;
      return { retryAfterS: r.retryAfterS, booked: Number(booked), drain: Number(drain) };
    });
  }

  it("tells each refused request its turn: behind the retries booked before it, at the pool's measured drain", () => {
    drain(0.5, 60);
    drain(10, 10);
    const seen = refusals(40);
    for (const [k, r] of seen.entries()) {
      expect(r.booked).toBe(k);
      // The explanation rounds the drain to 0.01.
      expect(r.retryAfterS).toBeGreaterThanOrEqual(Math.ceil((r.booked + 1) / (r.drain + 0.005)));
      expect(r.retryAfterS).toBeLessThanOrEqual(Math.ceil((r.booked + 1) / (r.drain - 0.005)));
    }
    // Ten a second for the last 10 s, after a slow minute: the 10-s average is about 6.5 a second.
    expect(seen[0].drain).toBeGreaterThan(5.5);
    expect(seen[0].drain).toBeLessThan(7.5);
    expect(seen[39].retryAfterS).toBeGreaterThanOrEqual(5);
    expect(seen[39].retryAfterS).toBeLessThan(10);
  });

  it("follows the load: the same refusals get sooner turns from a pool that drains faster", () => {
    drain(2, 30);
    const slow = refusals(20).at(-1)!;
    drain(8, 30);
    // The slow pool's booked retries are due by now (at most 20 / 2 s after their refusals).
    const fast = refusals(20).at(-1)!;
    expect(fast.booked).toBe(19);
    expect(slow.retryAfterS).toBeGreaterThanOrEqual(9);
    expect(fast.retryAfterS).toBeLessThanOrEqual(Math.ceil(slow.retryAfterS / 2));
  });

  it("counts a booked retry ahead only until it is due: then it is back, or its client gave up", () => {
    drain(4, 60);
    const first = refusals(12);
    const last = first.at(-1)!;
    expect(last.booked).toBe(11);
    advance(last.retryAfterS * 1000);
    const later = refusals(1)[0];
    expect(later.booked).toBe(0);
    expect(later.retryAfterS).toBe(Math.ceil(1 / later.drain));
  });

  it("falls back to one request a second per pod before any completion, and never exceeds the cap", () => {
    install(fleet({ waiting: 6 }, { waiting: 6 }, { maxRetryAfterS: 5 }));
    const first = route();
    expect(first).toMatchObject({ status: 429, retryAfterS: 1 });
    let last = 0;
    for (let i = 0; i < 30; i++) {
      const r = route();
      last = "retryAfterS" in r ? r.retryAfterS! : -1;
    }
    expect(last).toBe(5);
  });
});

describe("retries", () => {
  it("admits the retry of a refused request up to a limit halfway to the next class's, once", () => {
    install(fleet({ waiting: 2 }, { waiting: 2 }));
    const body = chat();
    // Sheddable's limit is 2: refused. Its retry's is 3 (halfway to Standard's 4), once it has waited.
    const refused = route({ priority: "sheddable" }, "llama", body);
    expect(refused).toMatchObject({ status: 429 });
    advance(((refused as { retryAfterS: number }).retryAfterS) * 1000);
    expect(route({ priority: "sheddable" }, "llama", body)).toMatchObject({ class: "sheddable", retried: true });
    // A new request of the class is still refused, and so is a second retry of the same body.
    expect(route({ priority: "sheddable" })).toMatchObject({ status: 429 });
    expect(route({ priority: "sheddable" }, "llama", body)).toMatchObject({ status: 429 });
  });

  it("gives a retry sent before its Retry-After no preference; the refusal it gets starts the wait again", () => {
    // 5 waiting per pod: Standard's limit (4) refuses, a retry's (6) would admit.
    install(fleet({ waiting: 5 }, { waiting: 5 }));
    const body = chat();
    expect(route({}, "llama", body)).toMatchObject({ status: 429 });
    // Straight back: refused like new work, with a new Retry-After.
    const early = route({}, "llama", body) as { status: number; retryAfterS: number };
    expect(early).toMatchObject({ status: 429 });
    // Just short of that: still new work.
    advance(early.retryAfterS * 1000 - 300);
    const late = route({}, "llama", body) as { status: number; retryAfterS: number };
    expect(late).toMatchObject({ status: 429 });
    // Waited the Retry-After of the last refusal: let in on the retry limit.
    advance(late.retryAfterS * 1000);
    expect(route({}, "llama", body)).toMatchObject({ retried: true, class: "standard" });
  });

  it("recognises the retry on another worker, and not after its Retry-After and grace have passed", async () => {
    const other = await NativeRouter.load();
    other.reset(8);
    other.setClock(now, now);
    install(fleet({ waiting: 5 }, { waiting: 5 }));
    shared.install(other, fleet({ waiting: 5 }, { waiting: 5 }));
    const body = chat();
    const refused = route({}, "llama", body);
    expect(refused).toMatchObject({ status: 429, retryAfterS: 1 });
    advance(1_000);
    other.setClock(now, now);
    expect(shared.route(other, body, "chat", {})).toMatchObject({ retried: true, class: "standard" });

    const late = chat();
    expect(route({}, "llama", late)).toMatchObject({ status: 429 });
    advance(2_000 + 15_000 + 1);
    expect(route({}, "llama", late)).toMatchObject({ status: 429 });
  });
});

describe("canary splits", () => {
  it("sends exactly 90/10 of a split model's requests to its targets, in their pools", () => {
    install(fleet({ running: 0, batchSlots: 256 }, { running: 0, batchSlots: 256 }));
    const served: Record<string, number> = {};
    for (let i = 0; i < 1000; i++) {
      const r = route({ mayClaimCritical: true }, "llama-canary");
      if (!("target" in r)) throw new Error(JSON.stringify(r));
      served[r.target] = (served[r.target] ?? 0) + 1;
      expect(r.model).toBe("llama-canary");
      expect(r.pool).toBe(r.target === "llama" ? "p" : "q");
      // The class is the requested model's; the served model's profile scores and admits it.
      expect(r.class).toBe("critical");
      shared.release(router, r.endpoint!);
    }
    expect(served).toEqual({ llama: 900, "llama-v2": 100 });
  });

  it("keeps the split across snapshots: a busy pool brings a new one every few requests", () => {
    let served = 0;
    for (let i = 0; i < 1000; i++) {
      if (i % 4 === 0) install({ ...fleet({ waiting: i % 3 }, {}), version: i + 1 });
      const r = route({ mayClaimCritical: true }, "llama-canary");
      if (!("target" in r)) throw new Error(JSON.stringify(r));
      if (r.target === "llama-v2") served++;
      shared.release(router, r.endpoint!);
    }
    expect(served).toBe(100);
  });
});

describe("explained decisions", () => {
  it("names the pod, the fallbacks and every scorer's weighted share", () => {
    install(fleet({ waiting: 2 }, { waiting: 0 }));
    const r = route({ explain: true });
    if (!("explanation" in r) || r.explanation === undefined) throw new Error(JSON.stringify(r));
    expect(r.explanation).toMatch(/^pod=10\.0\.0\.2:80; fallbacks=10\.0\.0\.1:80; model=llama; class=standard; profile=latency; scores=/);
    // B: queue 2 x 1 (least loaded); A: queue 2 x 1/3 (3 predicted waiting against 1).
    expect(r.explanation).toContain("10.0.0.2:80(queue=2.00,kvCache=1.00,running=1.00,lora=0.00,prefix=0.00,total=4.00)");
    expect(r.explanation).toContain("10.0.0.1:80(queue=0.67,");
    expect(route({})).not.toHaveProperty("explanation");
  });

  it("explains a refusal with its class, the booked retries and the drain rate", () => {
    install(fleet({ waiting: 9 }, { waiting: 9 }));
    const r = route({ explain: true, priority: "sheddable" });
    expect(r).toMatchObject({ status: 429, retryAfterS: 1 });
    expect("explanation" in r && r.explanation).toBe(
      "refused=pool_saturated; pool=p; model=llama; class=sheddable; profile=latency; booked_retries=0; drain_per_s=2.00; retry_after_s=1",
    );
  });
});
