// The running scorer alone on the native build.
import { beforeAll, describe, expect, it } from "vitest";
import { A, B, chat, endpoint, Workers } from "../../../../testing/fixtures/workers.js";

let w: Workers;
beforeAll(async () => {
  w = await Workers.start(2);
});

const fresh = () => w.fresh();

describe("running scorer", () => {
  it("prefers fewer requests on the pod per unit of capacity", () => {
    fresh();
    w.install([endpoint(A, { running: 10, capacity: 0.25 }), endpoint(B, { running: 20, capacity: 1 })], { running: 1 });
    expect(w.route(0, chat("r"))).toBe(B);
  });
});
