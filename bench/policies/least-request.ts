// Envoy's LEAST_REQUEST with equal weights: draw `choice_count` (default 2)
// random pods and take the one with the fewest active requests. Active
// requests are the proxy's own count (sent, response not finished), shared by
// all workers and exact: no metrics, no staleness.
import { deriveSeed, Rng } from "../../testing/fixtures/rng.js";
import type { PolicySpec } from "./types.js";

const CHOICE_COUNT = 2;

export const leastRequest: PolicySpec = {
  name: "least-request",
  description: "Envoy LEAST_REQUEST: fewest active requests of 2 random pods (power of two choices)",
  create({ fleet, seed }) {
    const rng = new Rng(deriveSeed(seed, "least-request"));
    return {
      decisionDelayMs: 0,
      route({ request }) {
        const pods = fleet.pools[request.pool];
        let best = pods[rng.int(pods.length)];
        for (let c = 1; c < CHOICE_COUNT; c++) {
          const other = pods[rng.int(pods.length)];
          if (fleet.inFlight(other) < fleet.inFlight(best)) best = other;
        }
        return { pod: best };
      },
    };
  },
};
