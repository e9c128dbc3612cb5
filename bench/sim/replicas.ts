/**
 * Several gateway replicas behind one front, as a production deployment runs
 * them: each replica is a whole gateway (its own Envoy workers and shared
 * data, in-flight counts, prefix index, health ledger, queue board), made by
 * the policy as if it were alone, and sees only the attempts the front sends
 * it. What replicas of a run do share is what the real deployment shares: a
 * component made once per run (the control plane, whose snapshot pushes
 * reach every replica alike) and the state-sharing hook (state-sharing.ts).
 *
 * The front is round-robin per attempt, as an L7 proxy (or an L4 balancer
 * with one request per connection) in front of the Envoys spreads them, and
 * as the live test's front does; a retry after a 429 is a new request and
 * takes the next turn. Round-robin gives every replica the same share of
 * each burst; a random front would add imbalance on top.
 */
import { deriveSeed } from "../../testing/fixtures/rng.js";
import type { Policy, PolicyEnv, PolicySpec, ReleaseHandler } from "../policies/types.js";
import type { TraceRequest } from "./workload.js";
import { periodicSharing, shareNothing, type PeriodicSharingOptions } from "./state-sharing.js";

export interface ReplicaOptions {
  /** Gateway replicas behind the front (1: today's single gateway). */
  count: number;
  /** Sharing through the control plane (docs/replicas.md); absent: share nothing, as the gateway does with sharing off. */
  sharing?: PeriodicSharingOptions;
}

export const SINGLE_GATEWAY: ReplicaOptions = { count: 1 };

/** Where the front sends each attempt, in the order attempts reach it. */
export interface Front {
  pick(request: TraceRequest): number;
}

export function roundRobinFront(count: number): Front {
  let next = 0;
  return {
    pick() {
      const replica = next;
      next = (next + 1) % count;
      return replica;
    },
  };
}

/**
 * A replica's seed: the run's own for the first (so one replica is today's
 * gateway, draw for draw), a derived one for the others, as independent
 * Envoys break ties and tick on their own.
 */
export function replicaSeed(seed: number, replica: number): number {
  return replica === 0 ? seed : deriveSeed(seed, `replica${replica}`);
}

/** Makes the run's gateways; with one replica, the policy exactly as it runs alone. */
export async function createGateways(spec: PolicySpec, env: Omit<PolicyEnv, "replica">, options: ReplicaOptions = SINGLE_GATEWAY): Promise<Policy> {
  const runWide = new Map<string, unknown>();
  // Alone, a gateway has no one to share with.
  const sharing = options.sharing && options.count > 1 ? periodicSharing(env.queue, options.sharing) : shareNothing;
  const replicas: Policy[] = [];
  for (let index = 0; index < options.count; index++) {
    replicas.push(
      await spec.create({
        ...env,
        seed: replicaSeed(env.seed, index),
        replica: {
          index,
          count: options.count,
          runSeed: env.seed,
          sharing,
          runWide<T>(key: string, make: () => T): T {
            if (!runWide.has(key)) runWide.set(key, make());
            return runWide.get(key) as T;
          },
        },
      }),
    );
  }
  return replicas.length === 1 ? replicas[0] : behindFront(replicas, roundRobinFront(replicas.length));
}

/** The replicas as one policy: each attempt to the replica the front picks; a held request is released by the replica holding it. */
export function behindFront(replicas: readonly Policy[], front: Front): Policy {
  const delays = new Set(replicas.map((r) => r.decisionDelayMs));
  if (delays.size !== 1) throw new Error("gateway replicas with different decision delays");
  return {
    decisionDelayMs: replicas[0].decisionDelayMs,
    route(req, now) {
      return replicas[front.pick(req.request)].route(req, now);
    },
    onRelease(handler: ReleaseHandler) {
      for (const r of replicas) r.onRelease?.(handler);
    },
  };
}
