// The LoRA affinity scorer alone on the native build, with two workers sharing its placements.
import { beforeAll, describe, expect, it } from "vitest";
import { A, B, C, chat, endpoint, queued, Workers } from "../../../../testing/fixtures/workers.js";

let w: Workers;
beforeAll(async () => {
  w = await Workers.start(2);
});

const fresh = () => w.fresh();

describe("LoRA affinity scorer", () => {
  const ADAPTER = "sql-lora";
  const body = chat("select", ADAPTER);

  it("ranks running > waiting > free slot > no slot", () => {
    const cases: Array<[EndpointMsg[], string]> = [
      [[endpoint(A, { maxLora: 2, waitingAdapters: [ADAPTER] }), endpoint(B, { maxLora: 2, runningAdapters: [ADAPTER] })], B],
      [[endpoint(A, { maxLora: 2, waitingAdapters: [ADAPTER] }), endpoint(B, { maxLora: 2 })], A],
      [[endpoint(A, { maxLora: 2, runningAdapters: ["x", "y"] }), endpoint(B, { maxLora: 2, runningAdapters: ["x"] })], B],
    ];
    for (const [eps, want] of cases) {
      fresh();
      w.install(eps, { lora: 1 }, [ADAPTER]);
      expect(w.route(0, body)).toBe(want);
    }
  });

  it("places a cold adapter on the same pod from every worker, and the load scorers can still overrule it", () => {
    const eps = [endpoint(A, { maxLora: 4 }), endpoint(B, { maxLora: 4 }), endpoint(C, { maxLora: 4 })];
    fresh();
    w.install(eps, { lora: 1 }, [ADAPTER]);
    const first = w.route(0, body);
    expect(w.route(1, body)).toBe(first);
    // Other adapters land on their own rendezvous pods, not all on one.
    const places = new Set(Array.from({ length: 12 }, (_, i) => (w.install(eps, { lora: 1 }, [`a${i}`]), w.route(0, chat("x", `a${i}`)))));
    expect(places.size).toBeGreaterThan(1);
    // A long queue on the placement pod sends the adapter to the emptiest free pod instead.
    fresh();
    w.install(eps.map((e) => (e.address === first ? { ...e, ...queued(20) } : e)), { lora: 1, queue: 1 }, [ADAPTER]);
    expect(w.route(0, body)).not.toBe(first);
  });

  it("remembers where it sent a cold adapter, and shares that with the other workers, before any scrape shows it", () => {
    const eps = [endpoint(A, { maxLora: 4 }), endpoint(B, { maxLora: 4 }), endpoint(C, { maxLora: 4 })];
    fresh();
    w.install(eps, { lora: 2, running: 1 }, [ADAPTER]);
    const home = w.route(0, body);
    w.release(0, home);
    w.tick();
    // The rendezvous pick is now the emptiest: without the shared placement the other worker would go there.
    const busy = eps.map((e) => (e.address === home ? { ...e, running: 1 } : e));
    w.install(busy, { lora: 2, running: 1 }, [ADAPTER]);
    expect(w.route(1, body)).toBe(home);
  });

  it("is neutral for base-model requests and for engines that report no adapters", () => {
    fresh();
    w.install([endpoint(A, { runningAdapters: [ADAPTER], maxLora: 1 }), endpoint(B, { waiting: 0 })], { lora: 1, queue: 1 }, [ADAPTER]);
    const seen = new Set(Array.from({ length: 20 }, (_, i) => w.route(0, chat(`b${i}`))));
    expect(seen.size).toBe(2);
    fresh();
    w.install([endpoint(A, { waiting: 3 }), endpoint(B)], { lora: 5, queue: 1 }, [ADAPTER]);
    expect(w.route(0, body)).toBe(B);
  });
});
