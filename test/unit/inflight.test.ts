// The in-flight table two workers share, on the native build: released at the end (shared with the
// worker's next write, or its tick), counted once
// against a new snapshot, no drift with steady metrics.
import { beforeAll, describe, expect, it } from "vitest";
import { A, B, chat, endpoint, queued, Workers } from "../../testing/fixtures/workers.js";
import type { RouteResult } from "../../testing/native/router.js";

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
    // The releasing worker sees it at once; the others once it writes the table again (its next routed request, or its tick).
    expect(w.shared.countOf(w.routers[1], first)).toBe(0);
    expect(w.count(first)).toBe(1);
    w.tick();
    expect(w.count(first)).toBe(0);
    w.release(1, first); // a stray release never goes below zero
    w.tick();
    expect(w.count(first)).toBe(0);
  });

  it("publishes a release with the releasing worker's next routed request, before any tick", () => {
    fresh();
    w.install([endpoint(A), endpoint(B)], { running: 1 });
    const first = w.route(1, chat("one"));
    w.release(1, first);
    expect(w.count(first)).toBe(1);
    // Worker 1's next request is counted with one write, which carries the release along.
    const second = w.route(1, chat("two"));
    expect(w.count(first)).toBe(second === first ? 1 : 0);
    expect(w.count(second)).toBe(1);
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

  it("counts a stream's prompt as its pod's prefill until its first bytes, so a short prompt goes around a long document", () => {
    fresh();
    w.install([endpoint(A), endpoint(B)], { queue: 1 });
    const stream = (content: string) => JSON.stringify({ model: "llama", stream: true, messages: [{ role: "user", content }] });
    const routed = (body: string, worker = 0) => {
      const r = w.shared.route(w.routers[worker], body) as Extract<RouteResult, { endpoint: string | null }>;
      if (!r.endpoint) throw new Error(JSON.stringify(r));
      return r;
    };
    // A ~3,000-token document, then a short chat question from the other worker: it goes to the other pod.
    const doc = routed(stream("lorem ipsum ".repeat(1000)));
    expect(doc.prefillTokens).toBeGreaterThan(2500);
    const other = doc.endpoint === A ? B : A;
    const hi = routed(stream("hi"), 1);
    expect(hi.endpoint).toBe(other);
    // Once both have answered their first bytes, each pod has one request decoding: a tie, either pod.
    w.shared.firstBytes(w.routers[1], other, hi.prefillTokens);
    w.shared.firstBytes(w.routers[1], doc.endpoint!, doc.prefillTokens);
    const seen = new Set<string>();
    for (let i = 0; i < 40; i++) {
      const to = routed(stream(`q${i}`)).endpoint!;
      seen.add(to);
      w.release(0, to);
    }
    expect(seen.size).toBe(2);
    // A request that is not a stream has no first bytes before its end: it never counts as prefill.
    expect(routed(chat("lorem ipsum ".repeat(1000))).prefillTokens).toBe(0);
  });

  it("ends a stream that never answered with its prefill taken off too", () => {
    fresh();
    w.install([endpoint(A)], { queue: 1 });
    const r = w.shared.route(w.routers[0], JSON.stringify({ model: "llama", stream: true, messages: [{ role: "user", content: "x ".repeat(400) }] }));
    if (!("endpoint" in r) || r.endpoint === null) throw new Error(JSON.stringify(r));
    w.shared.endRequest(w.routers[1], { address: A, prefillTokens: r.prefillTokens });
    w.tick();
    expect(w.count(A)).toBe(0);
    // The table is empty again: nothing of the prefill is left to encode.
    expect(w.shared.inflight.byteLength).toBeLessThanOrEqual(4);
  });
});
