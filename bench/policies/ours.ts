// Our gateway: the aggregator's snapshots, pushed to Envoy and picked up by
// each worker's filter on its refresh tick, routed by the very Wasm routing
// core the filter runs (build/native.wasm: body scanner, model lookup,
// scorers, picker, fleet view, in-flight accounting, prefix index), one
// instance per Envoy worker. What the filter keeps in shared data (the
// snapshot, the in-flight table, the prefix log) is kept here once and handed
// to every instance, as Envoy's shared data is to every worker.
import { encodeSnapshot, type SnapshotMsg } from "../../host/proto.js";
import { NativeRouter } from "../../host/native/router.js";
import { NativeSharedData } from "../../host/native/shared-data.js";
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

      // Shared data: the link writes each pushed snapshot (after the push delay)...
      let published: { version: number; bytes: Uint8Array } | undefined;
      const aggregator = new AggregatorModel(config, fleet, queue, model, phases, (snapshot: SnapshotMsg, t) => {
        queue.at(t + model.pushDelayMs, () => {
          published = { version: snapshot.version, bytes: encodeSnapshot(snapshot) };
        });
      });
      const shared = new NativeSharedData();

      // ...and every worker installs a newer version, and swaps prefix decisions, on its own refresh tick.
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
          shared.exchangePrefixLog(router);
          if (published === undefined || published.version === seen) return;
          shared.install(router, published.bytes);
          seen = published.version;
        });
      }

      // The stream's end releases its count (any worker may see it: the table is shared).
      const routedTo = new Map<number, string>();
      fleet.onFinished((request) => {
        const address = routedTo.get(request.index);
        if (address === undefined) return;
        routedTo.delete(request.index);
        shared.release(workers[request.worker], address);
      });

      const byAddress = new Map(fleet.pods.map((p) => [p.address, p.index]));
      return {
        // In-process in Envoy: ~0.1 ms added p50 at 4 KiB (npm run bench -- --overhead).
        decisionDelayMs: 0.1,
        route(req) {
          const result = shared.route(workers[req.request.worker], req.body, "chat");
          if ("status" in result) return { status: result.status, message: result.error.message };
          // The simulated clock never lets the filter's view age past its bound.
          if (result.endpoint === null) throw new Error("blind routing in the simulator");
          routedTo.set(req.request.index, result.endpoint);
          return { pod: byAddress.get(result.endpoint)! };
        },
      };
    },
  };
}
