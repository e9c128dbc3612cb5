// The prefix-cache scorer alone on the native build, with two workers sharing the prefix index.
import { beforeAll, describe, expect, it } from "vitest";
import { A, B, C, chat, endpoint, queued, SYSTEM, withSystem, Workers } from "../../../../testing/fixtures/workers.js";

let w: Workers;
beforeAll(async () => {
  w = await Workers.start(2);
});

const fresh = () => w.fresh();

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

  it("spreads prompts nobody holds over idle pods whose cache size is unknown, one per pod, from either worker", () => {
    fresh();
    const D = "10.0.0.4:80";
    const pods = [A, B, C, D].map((a) => endpoint(a));
    w.install(pods, { prefix: 3, running: 1 });
    const system = (g: number) => JSON.stringify({ model: "llama", messages: [{ role: "system", content: `tenant ${g}: ${SYSTEM}` }, { role: "user", content: "hi" }] });
    const homes: string[] = [];
    for (let g = 0; g < 4; g++) {
      const to = w.route(g % 2, system(g));
      w.release(g % 2, to);
      // Twice: a worker publishes its decisions at its own tick, after the other has read.
      w.tick();
      w.tick();
      homes.push(to);
    }
    expect(new Set(homes).size).toBe(4);
    // Each prompt then stays on its pod.
    for (let g = 0; g < 4; g++) expect(w.route(0, system(g))).toBe(homes[g]);
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
