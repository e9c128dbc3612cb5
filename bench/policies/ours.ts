// Our gateway: the aggregator's snapshots, pushed to Envoy and picked up by
// each worker's filter on its refresh tick, routed by the very Wasm routing
// core the filter runs (build/native.wasm: body scanner, model lookup,
// scorers, picker, admission, fleet view, in-flight accounting, prefix
// index), one instance per Envoy worker. What the filter keeps in shared
// data (the snapshot, the in-flight table, the prefix log) is kept here once
// and handed to every instance, as Envoy's shared data is to every worker.
// With several gateway replicas (sim/replicas.ts) each is one such Envoy of
// its own, and only the aggregator is theirs in common.
import { encodeSnapshot, type SnapshotMsg } from "../../host/proto.js";
import { NativeRouter } from "../../testing/native/router.js";
import { NativeSharedData } from "../../testing/native/shared-data.js";
import { AggregatorModel, gatewayConfig } from "../sim/aggregator.js";
import { shareGatewayState } from "../sim/replica-state.js";
import { deriveSeed, Rng } from "../../testing/fixtures/rng.js";
import type { Profile } from "./profiles.js";
import type { Decision, PolicySpec, ReleaseHandler } from "./types.js";
import type { TraceRequest } from "../sim/workload.js";
import type { EventQueue } from "../sim/events.js";
import type { SimFleet } from "../sim/fleet.js";
import type { GatewayConfig } from "../../host/config.js";
import type { GatewayModel } from "../scenario.js";

export interface OursOptions {
  /** Admission (429 when a pool is saturated) as the gateway config's default has it (on), or off. */
  admission?: boolean;
}

/** The core's clock is whole milliseconds (Envoy's, read as u64); the view is as fresh as the simulated aggregator made it. */
function setClock(router: NativeRouter, t: number): void {
  const ms = Math.floor(t);
  router.setClock(ms, ms);
}

/** The gateway's own answer, with a 429's Retry-After when the core gave one. */
function refusal(result: { status: number; error: { message: string }; retryAfterS?: number }): Decision {
  const { retryAfterS } = result;
  return { status: result.status, message: result.error.message, ...(retryAfterS === undefined ? {} : { retryAfterS }) };
}

/** The aggregator, and what its link to every Envoy last wrote to the Envoy's shared data: each pushed snapshot, after the push delay. */
class ControlPlane {
  readonly aggregator: AggregatorModel;
  published: { version: number; bytes: Uint8Array } | undefined;

  constructor(config: GatewayConfig, fleet: SimFleet, queue: EventQueue, model: GatewayModel, seed: number) {
    const phases = new Rng(deriveSeed(seed, "phases:aggregator"));
    this.aggregator = new AggregatorModel(config, fleet, queue, model, phases, (snapshot: SnapshotMsg, t) => {
      queue.at(t + model.pushDelayMs, () => {
        this.published = { version: snapshot.version, bytes: encodeSnapshot(snapshot) };
      });
    });
  }
}

export function ours(profile: Profile, opts: OursOptions = {}): PolicySpec {
  const admission = opts.admission ?? true;
  const name = `ours:${profile.name}${admission ? "" : ":no-admission"}`;
  return {
    name,
    description: `our Wasm filter (same routing core as in Envoy), ${profile.description}${admission ? "" : "; admission off"}`,
    async create({ scenario, trace, fleet, queue, seed, replica }) {
      const model = scenario.gateway;
      // One control plane however many gateway replicas: every Envoy is pushed the same snapshots after the same delay.
      const link = replica.runWide(`${name}:control-plane`, () =>
        new ControlPlane(gatewayConfig(scenario, trace, fleet, profile.weights, { admission }), fleet, queue, model, replica.runSeed),
      );
      const aggregator = link.aggregator;
      const shared = new NativeSharedData();
      if (replica.count > 1) {
        // The link is Envoy's singleton service, a VM of its own.
        const link = await NativeRouter.load();
        link.reset(deriveSeed(seed, "link"));
        shareGatewayState(replica.sharing, replica.index, shared, link);
      }

      // ...and every worker installs a newer version, and swaps prefix decisions, on its own refresh tick.
      const start = encodeSnapshot(aggregator.current);
      const workers = await Promise.all(
        Array.from({ length: model.workers }, async (_, w) => {
          const router = await NativeRouter.load();
          // The profile's seed, not the policy's name: with admission on or off the tie-breaks draw alike,
          // so the twins differ by admission alone.
          router.reset(deriveSeed(seed, `ours:${profile.name}:worker${w}`));
          router.setSnapshot(start);
          return router;
        }),
      );
      // Held requests by hold id (the request's index + 1), released by their worker's tick as the filter's are.
      const held = new Map<number, TraceRequest>();
      let release: ReleaseHandler = () => {
        throw new Error("a held request with no client to release it to");
      };
      const tickRng = new Rng(deriveSeed(seed, "phases:filter"));
      for (const router of workers) {
        let seen = aggregator.current.version;
        queue.every(tickRng.uniform(0, model.refreshMs), model.refreshMs, (t) => {
          // What this worker's requests released since it last wrote the table goes out first, as the filter's tick does.
          shared.flush(router);
          shared.loadPeers(router);
          shared.exchangePrefixLog(router);
          const published = link.published;
          if (published !== undefined && published.version !== seen) {
            shared.install(router, published.bytes);
            seen = published.version;
          }
          if (held.size === 0) return;
          setClock(router, t);
          for (const event of shared.pump(router)) {
            const request = held.get(event.id)!;
            held.delete(event.id);
            if ("status" in event) {
              release(request, refusal(event), t);
              continue;
            }
            if (event.endpoint === null) throw new Error("blind routing in the simulator");
            routedTo.set(request.index, { address: event.endpoint, prefillTokens: event.prefillTokens });
            release(request, { pod: byAddress.get(event.endpoint)! }, t);
          }
        });
      }

      // The stream's end releases its count (any worker may see it: the table is shared).
      // The core reads the time on every call: its drain-rate meter and Retry-After run on the simulated clock,
      // and the view is never older than the simulated aggregator makes it.
      // A stream's first bytes take its prompt off its pod's prefill (the filter's onResponseBody), on any worker.
      const routedTo = new Map<number, { address: string; prefillTokens: number }>();
      const byAddress = new Map(fleet.pods.map((p) => [p.address, p.index]));
      fleet.onFirstToken((request, _pod, t) => {
        const routed = routedTo.get(request.index);
        if (routed === undefined || routed.prefillTokens === 0) return;
        const router = workers[request.worker];
        setClock(router, t);
        shared.firstBytes(router, routed.address, routed.prefillTokens);
        routed.prefillTokens = 0;
      });
      fleet.onFinished((request, _pod, t) => {
        const routed = routedTo.get(request.index);
        if (routed === undefined) return;
        routedTo.delete(request.index);
        const { address, prefillTokens } = routed;
        const router = workers[request.worker];
        setClock(router, t);
        // The filter's own end of a request (core/lifecycle.ts): a pod's answer, its 400 included, drains the pool
        // and is judged for the health ledger; the client giving up at the deadline teaches nothing.
        const error = fleet.records[request.index].error;
        const status = error === undefined ? 200 : error.kind === "timeout" ? undefined : (error.status ?? 500);
        shared.endRequest(router, { address, status, prefillTokens });
      });

      // The simulated clients may all claim Critical, as the live config's `traffic: { critical: any }` lets them.
      const classOf = (priority: string) => ({ priority, mayClaimCritical: true });
      return {
        // In-process in Envoy: ~0.1 ms added p50 at 4 KiB (npm run bench -- --overhead).
        decisionDelayMs: 0.1,
        onRelease(handler) {
          release = handler;
        },
        route(req, now) {
          const router = workers[req.request.worker];
          setClock(router, now);
          const options = { ...classOf(req.request.priority), holdId: req.request.index + 1 };
          const result = shared.routeOrHold(router, req.body, "chat", options);
          if ("held" in result) {
            held.set(result.held, req.request);
            return { held: true };
          }
          if ("status" in result) return refusal(result);
          // The simulated clock never lets the filter's view age past its bound.
          if (result.endpoint === null) throw new Error("blind routing in the simulator");
          routedTo.set(req.request.index, { address: result.endpoint, prefillTokens: result.prefillTokens });
          return { pod: byAddress.get(result.endpoint)! };
        },
      };
    },
  };
}
