// The scoring core (queue, KV cache, running scorers and the max-score picker)
// as compiled into the filter, driven through the native build.
import { beforeAll, describe, expect, it } from "vitest";
import { NativeRouter } from "../../testing/native/router.js";
import type { EndpointMsg, WeightsMsg } from "../../host/proto.js";
import { endpoint, pool, snapshot } from "../../testing/fixtures/snapshot-builders.js";

let router: NativeRouter;
const CHAT = '{"model":"llama","messages":[{"role":"user","content":"hello"}]}';

beforeAll(async () => {
  router = await NativeRouter.load();
});

function load(endpoints: EndpointMsg[], weights: Partial<WeightsMsg> = {}) {
  router.reset(42);
  router.setSnapshot(snapshot([pool("p", "llama", endpoints, weights)]));
}

function pick(): string {
  const r = router.route(CHAT);
  if (!("endpoint" in r)) throw new Error(JSON.stringify(r));
  return r.endpoint;
}

describe("picker", () => {
  it("prefers the shortest queue", () => {
    load([endpoint("10.0.0.1:80", { waiting: 9 }), endpoint("10.0.0.2:80", { waiting: 0 }), endpoint("10.0.0.3:80", { waiting: 4 })],
      { queue: 1, kvCache: 0, running: 0 });
    expect(pick()).toBe("10.0.0.2:80");
  });

  it("prefers free KV cache", () => {
    load([endpoint("10.0.0.1:80", { kvCacheUsage: 0.9 }), endpoint("10.0.0.2:80", { kvCacheUsage: 0.2 })],
      { queue: 0, kvCache: 1, running: 0 });
    expect(pick()).toBe("10.0.0.2:80");
  });

  it("prefers fewer running requests", () => {
    load([endpoint("10.0.0.1:80", { running: 3 }), endpoint("10.0.0.2:80", { running: 30 })],
      { queue: 0, kvCache: 0, running: 1 });
    expect(pick()).toBe("10.0.0.1:80");
  });

  it("weighs criteria against each other as configured", () => {
    // a: long queue (its one batch slot taken), empty cache. b: no queue, nearly full cache.
    const eps = [endpoint("10.0.0.1:80", { waiting: 10, running: 1, batchSlots: 1, kvCacheUsage: 0 }), endpoint("10.0.0.2:80", { waiting: 0, kvCacheUsage: 0.95 })];
    load(eps, { queue: 1, kvCache: 5, running: 0 });
    expect(pick()).toBe("10.0.0.1:80");
    load(eps, { queue: 5, kvCache: 1, running: 0 });
    expect(pick()).toBe("10.0.0.2:80");
  });

  it("skips endpoints with stale metrics, and fails open when all are stale", () => {
    load([endpoint("10.0.0.1:80", { fresh: false }), endpoint("10.0.0.2:80", { waiting: 50 })]);
    for (let i = 0; i < 20; i++) expect(pick()).toBe("10.0.0.2:80");
    load([endpoint("10.0.0.1:80", { fresh: false }), endpoint("10.0.0.2:80", { fresh: false, waiting: 50 })]);
    expect(pick()).toBe("10.0.0.1:80");
  });

  it("spreads a burst between snapshots by counting its requests in flight", () => {
    const tally = new Map<string, number>();
    // Idle pods queue nothing, so the running batch spreads it: join the shortest.
    load([endpoint("10.0.0.1:80"), endpoint("10.0.0.2:80"), endpoint("10.0.0.3:80"), endpoint("10.0.0.4:80")],
      { queue: 1, kvCache: 0, running: 1 });
    for (let i = 0; i < 40; i++) {
      const e = pick();
      tally.set(e, (tally.get(e) ?? 0) + 1);
    }
    expect([...tally.values()]).toEqual([10, 10, 10, 10]);
  });

  it("breaks ties at random but reproducibly for a seed", () => {
    const eps = [endpoint("10.0.0.1:80"), endpoint("10.0.0.2:80"), endpoint("10.0.0.3:80")];
    const run = () => {
      load(eps, { queue: 0, kvCache: 1, running: 0 });
      return Array.from({ length: 30 }, () => pick());
    };
    const a = run();
    expect(run()).toEqual(a);
    expect(new Set(a).size).toBe(3);
  });

  it("answers 503 in OpenAI format before any snapshot has arrived", async () => {
    const fresh = await NativeRouter.load();
    expect(fresh.route(CHAT)).toMatchObject({ status: 503, error: { type: "service_unavailable", code: "no_endpoint" } });
  });

  it("answers 503 in OpenAI format when a pool has no endpoints", () => {
    load([]);
    const r = router.route(CHAT);
    expect(r).toMatchObject({ status: 503, error: { type: "service_unavailable" } });
  });
});
