// Envoy's ROUND_ROBIN: each worker thread keeps its own rotation, started at
// a random offset (as Envoy does, so workers do not move in lockstep).
import { deriveSeed, Rng } from "../../testing/fixtures/rng.js";
import type { PolicySpec } from "./types.js";

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
