// Envoy's RANDOM: a uniformly random pod of the model's pool.
import { deriveSeed, Rng } from "../../testing/fixtures/rng.js";
import type { PolicySpec } from "./types.js";

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
