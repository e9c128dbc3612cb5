// The queue scorer alone on the native build (the filter's routing core).
import { beforeAll, describe, expect, it } from "vitest";
import { A, B, C, chat, endpoint, queued, Workers } from "../../../../testing/fixtures/workers.js";

let w: Workers;
beforeAll(async () => {
  w = await Workers.start(2);
});

const fresh = () => w.fresh();

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
