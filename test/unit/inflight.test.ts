// The in-flight table two workers share, on the native build: released at the end, counted once
// against a new snapshot, no drift with steady metrics.
import { beforeAll, describe, expect, it } from "vitest";
import { A, B, chat, endpoint, queued, Workers } from "../../testing/fixtures/workers.js";

let w: Workers;
beforeAll(async () => {
  w = await Workers.start(2);
});

const fresh = () => w.fresh();

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
