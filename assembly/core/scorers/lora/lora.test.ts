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

  it("prefers an idle pod it placed the adapter on (vLLM lists none idle) over a free one, below one that runs it, from every worker", () => {
    const idle = [endpoint(A, { maxLora: 2 }), endpoint(B, { maxLora: 2 })];
    fresh();
    w.install(idle, { lora: 1 }, [ADAPTER]);
    const cold = w.route(0, body); // where a cold adapter goes: the rendezvous pick
    const other = cold === A ? B : A;
    fresh();
    // Placed on the other pod (the only one then), its requests since ended: the scrape lists nothing anywhere.
    w.install(idle.filter((e) => e.address === other), { lora: 1 }, [ADAPTER]);
    expect(w.route(0, body)).toBe(other);
    w.release(0, other);
    w.tick();
    w.install(idle, { lora: 1 }, [ADAPTER]);
    expect([w.route(0, body), w.route(1, body)]).toEqual([other, other]);
    // A pod that lists it running beats the one that probably still has it.
    w.install(idle.map((e) => (e.address === cold ? { ...e, runningAdapters: [ADAPTER] } : e)), { lora: 1 }, [ADAPTER]);
    expect(w.route(1, body)).toBe(cold);
  });

  it("forgets the adapter on a pod once max_lora other adapters were placed there since (vLLM evicts the least recently used)", () => {
    const idle = [endpoint(A, { maxLora: 2 }), endpoint(B, { maxLora: 2 })];
    const adapters = [ADAPTER, "x-lora", "y-lora"];
    fresh();
    w.install(idle, { lora: 1 }, adapters);
    const cold = w.route(0, body);
    const other = cold === A ? B : A;
    fresh();
    const placeOnOther = (model: string) => {
      w.install(idle.filter((e) => e.address === other), { lora: 1 }, adapters);
      w.route(0, chat("select", model));
      w.install(idle, { lora: 1 }, adapters);
    };
    placeOnOther(ADAPTER);
    placeOnOther("x-lora");
    // One other adapter since: both still fit its two slots.
    expect(w.route(0, body)).toBe(other);
    placeOnOther("x-lora");
    placeOnOther("y-lora");
    // Two others since: evicted there, so it is cold again and goes where a cold one goes.
    expect(w.route(0, body)).toBe(cold);
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
