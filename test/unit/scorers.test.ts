// Each scorer, the in-flight accounting and the shared prefix index, on the
// native build (the filter's routing core), one behaviour at a time: a test
// turns on only the weights it is about.
import { beforeAll, describe, expect, it } from "vitest";
import { NativeRouter } from "../../testing/native/router.js";
import { NativeSharedData } from "../../testing/native/shared-data.js";
import type { EndpointMsg, WeightsMsg } from "../../host/proto.js";
import { endpoint, pool, snapshot } from "../../testing/fixtures/snapshot-builders.js";

const OFF: WeightsMsg = { queue: 0, kvCache: 0, running: 0, lora: 0, prefix: 0 };
const A = "10.0.0.1:80";
const B = "10.0.0.2:80";
const C = "10.0.0.3:80";

/** Several routers (Envoy workers) sharing what the filter keeps in shared data. */
class Workers {
  shared = new NativeSharedData();
  constructor(readonly routers: NativeRouter[]) {}

  static async start(n: number): Promise<Workers> {
    const routers = await Promise.all(Array.from({ length: n }, () => NativeRouter.load()));
    routers.forEach((r, i) => r.reset(100 + i));
    return new Workers(routers);
  }

  install(endpoints: EndpointMsg[], weights: Partial<WeightsMsg>, adapters: string[] = []): void {
    const snap = snapshot([pool("p", "llama", endpoints, { ...OFF, ...weights })], adapters);
    for (const r of this.routers) this.shared.install(r, snap);
  }

  route(worker: number, body: string): string {
    const result = this.shared.route(this.routers[worker], body);
    if (!("endpoint" in result) || result.endpoint === null) throw new Error(JSON.stringify(result));
    return result.endpoint;
  }

  release(worker: number, address: string): void {
    this.shared.release(this.routers[worker], address);
  }

  /** Every worker's refresh tick: swap prefix decisions through the shared log. */
  tick(): void {
    for (const r of this.routers) this.shared.exchangePrefixLog(r);
  }

  count(address: string): number {
    return this.shared.countOf(this.routers[0], address);
  }
}

/** A pod whose one batch slot is taken, with `n` more waiting for it: a queue, not requests starting. */
const queued = (n: number): Partial<EndpointMsg> => ({ waiting: n, running: 1, batchSlots: 1 });

const chat = (content: string, model = "llama") => JSON.stringify({ model, messages: [{ role: "user", content }] });
const SYSTEM = "You are the support assistant of a large company. ".repeat(60); // ~3 KiB
const withSystem = (user: string) => JSON.stringify({ model: "llama", messages: [{ role: "system", content: SYSTEM }, { role: "user", content: user }] });

let w: Workers;
beforeAll(async () => {
  w = await Workers.start(2);
});

function fresh(): void {
  w.routers.forEach((r, i) => r.reset(100 + i));
  w.shared = new NativeSharedData();
}

describe("in-flight accounting", () => {
  it("counts requests in flight across workers and releases them at the end", () => {
    fresh();
    w.install([endpoint(A), endpoint(B)], { running: 1 });
    const first = w.route(0, chat("one"));
    const second = w.route(1, chat("two"));
    expect(second).not.toBe(first); // worker 1 saw worker 0's request
    expect(w.count(first)).toBe(1);
    w.release(1, first);
    expect(w.count(first)).toBe(0);
    w.release(1, first); // a stray release never goes below zero
    expect(w.count(first)).toBe(0);
  });

  it("does not drift with steady metrics: released requests stop counting (the idle pod keeps winning)", () => {
    fresh();
    // One idle pod, one with 50 waiting, and metrics that never change (no new snapshot).
    w.install([endpoint(A), endpoint(B, { waiting: 50 })], { queue: 2, running: 1 });
    const tally = { [A]: 0, [B]: 0 };
    for (let i = 0; i < 400; i++) {
      const worker = i % 2;
      const to = w.route(worker, chat(`request ${i}`));
      tally[to as typeof A]++;
      // A few requests overlap, then finish.
      if (i >= 3) w.release(worker, to);
    }
    expect(tally[B]).toBe(0);
  });

  it("counts a request sent since the scrape once: a new snapshot takes the counts as its baseline", () => {
    fresh();
    // Both already queue, so what they are sent queues too.
    w.install([endpoint(A, { waiting: 1 }), endpoint(B, { waiting: 1 })], { queue: 1 });
    // Three requests go out; the next scrape shows them queued on A.
    const sent = [w.route(0, chat("x")), w.route(0, chat("y")), w.route(0, chat("z"))];
    expect(new Set(sent).size).toBe(2);
    w.install([endpoint(A, { waiting: 2 }), endpoint(B, { waiting: 1 })], { queue: 1 });
    // Counted once (2 vs 1 queued), not twice (4 vs 2): a tie would mean double counting cancelled out,
    // so check the margin: one more request to B makes them equal, and then A is not preferred.
    expect(w.route(0, chat("next"))).toBe(B);
  });
});

describe("queue scorer (predicted wait, capacity-aware)", () => {
  it("prefers a fast pod with 4 queued to a 0.35x pod with 2 queued", () => {
    fresh();
    w.install([endpoint(A, { ...queued(2), capacity: 0.35 }), endpoint(B, { ...queued(4), capacity: 1 })], { queue: 1 });
    expect(w.route(0, chat("q"))).toBe(B);
  });

  it("prefers an idle 0.35x pod to a fast pod with 2 queued, and the fast one when both are idle", () => {
    fresh();
    w.install([endpoint(A, { capacity: 0.35 }), endpoint(B, { ...queued(2), capacity: 1 })], { queue: 1 });
    expect(w.route(0, chat("q"))).toBe(A);
    fresh();
    w.install([endpoint(A, { capacity: 0.35 }), endpoint(B, { capacity: 1 })], { queue: 1 });
    expect(w.route(0, chat("q"))).toBe(B);
  });

  it("treats an unknown capacity as the median known one", () => {
    fresh();
    // C unknown = median(0.5, 1) ... = 1 of {0.5, 1}; with equal queues it ties with B, never loses to A.
    w.install([endpoint(A, { capacity: 0.5 }), endpoint(B, { capacity: 1 }), endpoint(C, { capacity: 0 })], { queue: 1 });
    for (let i = 0; i < 20; i++) {
      const to = w.route(0, chat(`u${i}`));
      expect(to).not.toBe(A);
      w.release(0, to);
    }
  });
});

describe("running scorer", () => {
  it("prefers fewer requests on the pod per unit of capacity", () => {
    fresh();
    w.install([endpoint(A, { running: 10, capacity: 0.25 }), endpoint(B, { running: 20, capacity: 1 })], { running: 1 });
    expect(w.route(0, chat("r"))).toBe(B);
  });
});

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

describe("prefix-cache scorer", () => {
  it("sends requests sharing a long prefix to the pod that has it, from every worker once the log is swapped", () => {
    fresh();
    w.install([endpoint(A), endpoint(B), endpoint(C)], { prefix: 3, running: 1 });
    const home = w.route(0, withSystem("first question"));
    w.tick();
    // The next scrape shows the home pod busier; the cached prefix still wins within the load bound.
    w.install([endpoint(A), endpoint(B), endpoint(C)].map((e) => (e.address === home ? { ...e, running: 5 } : e)), { prefix: 3, running: 1 });
    for (let i = 0; i < 6; i++) {
      const to = w.route(i % 2, withSystem(`question ${i}`));
      expect(to).toBe(home);
      w.release(i % 2, to);
    }
  });

  it("spreads a hot prefix once its pod's queue passes the bound", () => {
    fresh();
    w.install([endpoint(A), endpoint(B), endpoint(C)], { prefix: 3, queue: 1 });
    const home = w.route(0, withSystem("seed"));
    const busy = [endpoint(A), endpoint(B), endpoint(C)].map((e) => (e.address === home ? { ...e, ...queued(6) } : e));
    w.install(busy, { prefix: 3, queue: 1 });
    expect(w.route(0, withSystem("overflow"))).not.toBe(home);
  });

  it("gives no affinity to short prompts or to prompts that share nothing", () => {
    fresh();
    w.install([endpoint(A), endpoint(B)], { prefix: 3 });
    const seen = new Set(Array.from({ length: 30 }, (_, i) => w.route(0, chat(`short ${i}`))));
    expect(seen.size).toBe(2); // ties broken at random, no stickiness
  });

  it("keeps prefixes apart per model (an adapter's cache is not its base model's)", () => {
    fresh();
    w.install([endpoint(A), endpoint(B), endpoint(C)], { prefix: 3, running: 1 }, ["lora-x"]);
    const base = w.route(0, withSystem("q"));
    const adapterBody = JSON.stringify({ model: "lora-x", messages: [{ role: "system", content: SYSTEM }, { role: "user", content: "q" }] });
    // The base model's prefix does not attract the adapter's request: it goes by load (away from `base`).
    expect(w.route(0, adapterBody)).not.toBe(base);
  });
});
