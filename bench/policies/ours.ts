// Our gateway: the aggregator's snapshots, pushed to Envoy and picked up by
// each worker's filter on its refresh tick, routed by the very Wasm routing
// core the filter runs (build/native.wasm: body scanner, model lookup,
// scorers, picker, pending-pick counts), one instance per Envoy worker.
import { encodeSnapshot, type SnapshotMsg } from "../../host/proto.js";
import { NativeRouter } from "../../host/native/router.js";
import { AggregatorModel, gatewayConfig } from "../sim/aggregator.js";
import { deriveSeed, Rng } from "../sim/rng.js";
import type { Profile } from "./profiles.js";
import type { PolicySpec } from "./types.js";

export function ours(profile: Profile): PolicySpec {
  const name = `ours:${profile.name}`;
  return {
    name,
    description: `our Wasm filter (same routing core as in Envoy), ${profile.description}`,
    async create({ scenario, trace, fleet, queue, seed }) {
      const model = scenario.gateway;
      const phases = new Rng(deriveSeed(seed, "phases:aggregator"));
      const config = gatewayConfig(scenario, trace, fleet, profile.weights);

      // The Envoy side: the link writes each pushed snapshot to shared data (after the push delay)...
      let shared: { version: number; bytes: Uint8Array } | undefined;
      const aggregator = new AggregatorModel(config, fleet, queue, model, phases, (snapshot: SnapshotMsg, t) => {
        queue.at(t + model.pushDelayMs, () => {
          shared = { version: snapshot.version, bytes: encodeSnapshot(snapshot) };
        });
      });

      // ...and every worker loads a newer version on its own refresh tick.
      const start = encodeSnapshot(aggregator.current);
      const workers = await Promise.all(
        Array.from({ length: model.workers }, async (_, w) => {
          const router = await NativeRouter.load();
          router.reset(deriveSeed(seed, `${name}:worker${w}`));
          router.setSnapshot(start);
          return router;
        }),
      );
      const tickRng = new Rng(deriveSeed(seed, "phases:filter"));
      for (const router of workers) {
        let seen = aggregator.current.version;
        queue.every(tickRng.uniform(0, model.refreshMs), model.refreshMs, () => {
          if (shared === undefined || shared.version === seen) return;
          router.setSnapshot(shared.bytes);
          seen = shared.version;
        });
      }

      const byAddress = new Map(fleet.pods.map((p) => [p.address, p.index]));
      return {
        // In-process in Envoy: ~0.1 ms added p50 at 4 KiB (npm run bench -- --overhead).
        decisionDelayMs: 0.1,
        route(req) {
          const result = workers[req.request.worker].route(req.body, "chat");
          if ("status" in result) return { status: result.status, message: result.error.message };
          // The simulated clock never lets the filter's view age past its bound.
          if (result.endpoint === null) throw new Error("blind routing in the simulator");
          return { pod: byAddress.get(result.endpoint)! };
        },
      };
    },
  };
}
