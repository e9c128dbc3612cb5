// Envoy replicas that see one another's sends late lean apart among pods that
// score alike (assembly/core/scheduling/replica-lean.ts), on the native build.
import { beforeAll, describe, expect, it } from "vitest";
import { chat, endpoint, queued, Workers } from "../../testing/fixtures/workers.js";

const PODS = Array.from({ length: 6 }, (_, i) => `10.0.1.${i + 1}:80`);
/** Pod i is at slot i of the pool: replica k of 2 owns the pods at even (k = 0) or odd (k = 1) slots. */
const ownedBy = (k: number, count: number) => PODS.filter((_, i) => i % count === k);

let replicas: Workers[];
beforeAll(async () => {
  replicas = await Promise.all([Workers.start(1), Workers.start(1)]);
});

/** Each replica's first pick of a fresh decision on idle identical pods, `n` times, releasing each. */
function firstPicks(w: Workers, n: number): Set<string> {
  const seen = new Set<string>();
  for (let i = 0; i < n; i++) {
    const to = w.route(0, chat(`q${i}`));
    seen.add(to);
    w.release(0, to);
  }
  return seen;
}

function setUp(places: Array<[number, number]>, pods = PODS.map((a) => endpoint(a))): void {
  replicas.forEach((w, k) => {
    w.fresh();
    w.install(pods, { queue: 2, running: 1, kvCache: 1 });
    w.shared.place = { index: places[k][0], count: places[k][1] };
    w.tick();
  });
}

describe("replicas lean apart among near-equal pods", () => {
  it("each of two replicas keeps to its own share of identical idle pods", () => {
    setUp([[0, 2], [1, 2]]);
    replicas.forEach((w, k) => {
      const picks = firstPicks(w, 30);
      for (const pod of picks) expect(ownedBy(k, 2)).toContain(pod);
    });
  });

  it("alone, a gateway has no share: its ties spread over every pod", () => {
    setUp([[0, 0], [0, 1]]);
    for (const w of replicas) expect(firstPicks(w, 60).size).toBe(PODS.length);
  });

  it("a real difference in load still decides: a busy own pod loses to an idle one of another's share", () => {
    // Replica 0 owns slots 0, 2, 4: all queued.
    const pods = PODS.map((a, i) => endpoint(a, i % 2 === 0 ? queued(2) : {}));
    setUp([[0, 2], [1, 2]], pods);
    for (const pod of firstPicks(replicas[0], 20)) expect(ownedBy(1, 2)).toContain(pod);
  });

  it("a nonsense place (index beyond the count) leaves the gateway alone", () => {
    setUp([[5, 2], [7, 3]]);
    for (const w of replicas) expect(firstPicks(w, 60).size).toBe(PODS.length);
  });
});
