// What the filter hands Envoy besides the best pod: the pool, the fallbacks in
// order, and what it does when its view of the fleet is too old or a pod keeps
// failing. All through the native build of the filter's own code.
import { beforeEach, beforeAll, describe, expect, it } from "vitest";
import { NativeRouter, type RouteResult } from "../../testing/native/router.js";
import { endpoint, pool, snapshot } from "../../testing/fixtures/snapshot-builders.js";

let router: NativeRouter;
const CHAT = '{"model":"llama","messages":[{"role":"user","content":"hello"}]}';
const RULES = { ejectAfter: 3, ejectMs: 10_000 };

beforeAll(async () => {
  router = await NativeRouter.load();
});

/** Pods 10.0.0.1-4 with the given queue lengths; only the queue is weighed. */
function loadQueues(waiting: number[]): void {
  router.setSnapshot(snapshot([pool("p", "llama",
    waiting.map((w, i) => endpoint(`10.0.0.${i + 1}:80`, { waiting: w })),
    { queue: 1, kvCache: 0, running: 0 })]));
}

beforeEach(() => {
  router.reset(7);
  router.setViewPolicy(3_000, "fail-open");
  router.setClock(1_000_000, 1_000_000);
  loadQueues([0, 3, 6, 9]);
});

function routed(r: RouteResult) {
  if ("status" in r) throw new Error(`not routed: ${JSON.stringify(r)}`);
  return r;
}

describe("ranked destination", () => {
  it("lists the best pod first, then two fallbacks in score order, and names the pool", () => {
    const r = routed(router.route(CHAT));
    expect(r.endpoint).toBe("10.0.0.1:80");
    expect(r.fallbacks).toEqual(["10.0.0.2:80", "10.0.0.3:80"]);
    expect(r.pool).toBe("p");
  });

  it("never offers a pod with stale metrics as a fallback while fresh ones exist", () => {
    router.setSnapshot(snapshot([pool("p", "llama", [
      endpoint("10.0.0.1:80", { waiting: 0 }),
      endpoint("10.0.0.2:80", { waiting: 0, fresh: false }),
      endpoint("10.0.0.3:80", { waiting: 5 }),
    ], { queue: 1, kvCache: 0, running: 0 })]));
    const r = routed(router.route(CHAT));
    expect([r.endpoint, ...r.fallbacks]).toEqual(["10.0.0.1:80", "10.0.0.3:80"]);
  });
});

describe("view age", () => {
  it("past the bound, names only the pods last known good, fewest of its requests in flight first", () => {
    router.setSnapshot(snapshot([pool("p", "llama", [
      endpoint("10.0.0.1:80", { waiting: 9 }),
      endpoint("10.0.0.2:80", { fresh: false }),
      endpoint("10.0.0.3:80", { waiting: 0 }),
      endpoint("10.0.0.4:80", { waiting: 0 }),
    ], { queue: 1, kvCache: 0, running: 0 })]));
    router.setClock(1_000_000, 1_000_000);
    router.setHealthRules({ ejectAfter: 1, ejectMs: 60_000 });
    router.endRequest({ address: "10.0.0.4:80", status: 500 });
    router.setClock(1_000_000 + 3_001, 1_000_000);
    // Stale metrics rank nothing: 10.0.0.1 and 10.0.0.3 tie on none in flight; the
    // pod the aggregator saw failing and the ejected one are never named.
    const first = routed(router.route(CHAT));
    expect(new Set([first.endpoint, ...first.fallbacks])).toEqual(new Set(["10.0.0.1:80", "10.0.0.3:80"]));
    expect(first.pool).toBe("p");
    // The first is now busier by one request of ours: the other goes first.
    const second = routed(router.route(CHAT));
    expect(second.endpoint).not.toBe(first.endpoint);
    expect(second.endpoint).toBe(first.fallbacks[0]);
  });

  it("past the bound with no pod last known good, names none: Envoy's balancer picks among healthy hosts", () => {
    router.setSnapshot(snapshot([pool("p", "llama", [
      endpoint("10.0.0.1:80", { fresh: false }),
      endpoint("10.0.0.2:80", { fresh: false }),
    ], { queue: 1, kvCache: 0, running: 0 })]));
    router.setClock(1_000_000 + 3_001, 1_000_000);
    const r = routed(router.route(CHAT));
    expect(r.endpoint).toBeNull();
    expect(r.fallbacks).toEqual([]);
    expect(r.pool).toBe("p");
  });

  it("still ranks pods at exactly the bound", () => {
    router.setClock(1_000_000 + 3_000, 1_000_000);
    expect(routed(router.route(CHAT)).endpoint).toBe("10.0.0.1:80");
  });

  it("answers 503 past the bound under the reject policy, and routes again once heard from", () => {
    router.setViewPolicy(3_000, "reject");
    router.setClock(1_000_000 + 10_000, 1_000_000);
    const r = router.route(CHAT);
    expect("status" in r && r.status).toBe(503);
    router.setClock(1_000_000 + 10_000, 1_000_000 + 9_990);
    expect(routed(router.route(CHAT)).endpoint).toBe("10.0.0.1:80");
  });

  it("treats a view never heard from as stale", () => {
    router.setViewPolicy(3_000, "reject");
    router.setClock(5_000, 0);
    const r = router.route(CHAT);
    expect("status" in r && r.status).toBe(503);
  });
});

describe("passive health", () => {
  beforeEach(() => router.setHealthRules(RULES));

  it("ejects a pod after consecutive failures, and lets it back after the ejection time", () => {
    router.endRequest({ address: "10.0.0.1:80", status: 500 });
    router.endRequest({ address: "10.0.0.1:80", status: 500 });
    expect(routed(router.route(CHAT)).endpoint).toBe("10.0.0.1:80");
    router.endRequest({ address: "10.0.0.1:80", status: 500 });
    for (let i = 0; i < 10; i++) {
      const r = routed(router.route(CHAT));
      expect([r.endpoint, ...r.fallbacks]).not.toContain("10.0.0.1:80");
    }
    router.setClock(1_000_000 + RULES.ejectMs + 1, 1_000_000 + RULES.ejectMs);
    expect(routed(router.route(CHAT)).endpoint).toBe("10.0.0.1:80");
  });

  it("clears a pod's failures on a success", () => {
    router.endRequest({ address: "10.0.0.1:80", status: 500 });
    router.endRequest({ address: "10.0.0.1:80", status: 500 });
    router.endRequest({ address: "10.0.0.1:80", status: 200 });
    router.endRequest({ address: "10.0.0.1:80", status: 500 });
    expect(routed(router.route(CHAT)).endpoint).toBe("10.0.0.1:80");
  });

  it.each([429, 503])("passes over a pod that answered %i itself for the back-off only, counting no failure", (status) => {
    router.setHealthRules({ ...RULES, ejectAfter: 1, saturatedBackoffMs: 1_000 });
    router.endRequest({ address: "10.0.0.1:80", status });
    const r = routed(router.route(CHAT));
    expect([r.endpoint, ...r.fallbacks]).not.toContain("10.0.0.1:80");
    // Back after the back-off, not the ejection time: with one failure ejecting, a failure would have kept it out.
    router.setClock(1_000_000 + 1_001, 1_000_000 + 1_001);
    expect(routed(router.route(CHAT)).endpoint).toBe("10.0.0.1:80");
    // Envoy's own 503 for a pod it could not reach is a failure, not saturation.
    router.endRequest({ address: "10.0.0.1:80", status: 503, flags: 0x20n });
    router.setClock(1_000_000 + 2_002, 1_000_000 + 2_002);
    const after = routed(router.route(CHAT));
    expect([after.endpoint, ...after.fallbacks]).not.toContain("10.0.0.1:80");
  });

  it("keeps ejections across a new snapshot, and falls back to ejected pods only when all are", () => {
    for (const a of ["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"]) for (let i = 0; i < 3; i++) router.endRequest({ address: a, status: 500 });
    loadQueues([0, 0, 0, 9]);
    const r = routed(router.route(CHAT));
    expect([r.endpoint, ...r.fallbacks]).toEqual(["10.0.0.4:80"]);
    router.setHealthRules({ ...RULES, ejectAfter: 1 });
    router.endRequest({ address: "10.0.0.4:80", status: 500 });
    expect(routed(router.route(CHAT)).endpoint).not.toBeNull();
  });
});
