// Envoy's own load balancers, as the baselines: each picks among the
// model's pool with the seeded randomness Envoy would draw.
import { deriveSeed, Rng } from "../../testing/fixtures/rng.js";
import type { PolicySpec } from "./types.js";

/** ROUND_ROBIN: each worker thread keeps its own rotation, started at a random offset (as Envoy does, so workers do not move in lockstep). */
export const roundRobin: PolicySpec = {
  name: "round-robin",
  description: "Envoy ROUND_ROBIN: per-worker rotation over the model's pods; the baseline the ratios compare against",
  create({ scenario, fleet, seed }) {
    const rng = new Rng(deriveSeed(seed, "round-robin"));
    const next = Array.from({ length: scenario.gateway.workers }, () => fleet.pools.map((pods) => rng.int(pods.length)));
    return {
      decisionDelayMs: 0,
      route({ request }) {
        const pods = fleet.pools[request.pool];
        const rotation = next[request.worker];
        const i = rotation[request.pool];
        rotation[request.pool] = (i + 1) % pods.length;
        return { pod: pods[i] };
      },
    };
  },
};

/** RANDOM: a uniformly random pod of the model's pool. */
export const random: PolicySpec = {
  name: "random",
  description: "Envoy RANDOM: a uniformly random pod",
  create({ fleet, seed }) {
    const rng = new Rng(deriveSeed(seed, "random"));
    return {
      decisionDelayMs: 0,
      route({ request }) {
        const pods = fleet.pools[request.pool];
        return { pod: pods[rng.int(pods.length)] };
      },
    };
  },
};

const CHOICE_COUNT = 2;

/**
 * LEAST_REQUEST with equal weights: draw `choice_count` (default 2) random
 * pods and take the one with the fewest active requests. Active requests are
 * the proxy's own count (sent, response not finished), shared by all workers
 * and exact: no metrics, no staleness.
 */
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
