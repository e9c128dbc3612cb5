// The cycle's end: the snapshot is rebuilt from the pods' entries only when
// one of them (or a pool's membership) changed. Entries are compared pod by
// pod as they are brought up to date, so nothing is serialised to find out.
// The aggregator and the simulator both build their snapshots here.
import type { GatewayConfig, PoolConfig } from "../config.js";
import type { PodEntry } from "./pod-entry.js";
import { firstSnapshot, modelsAndProfiles, nextSnapshot, poolMsg, type Snapshot, type SnapshotBody } from "./snapshot.js";

export interface Built {
  snapshot: Snapshot;
  /** Date.now() of the oldest change it carries: how long the longest-waiting change took to go out. */
  oldestChangeMs: number;
}

/** A pool as the builder reads it: its config and its pods, in order (the aggregator's PoolState is one). */
export interface SnapshotPool {
  readonly config: PoolConfig;
  readonly pods: Iterable<PodEntry>;
}

export class SnapshotBuilder {
  /** The config's part of every snapshot (models, profiles), built once per config. */
  private frame: Pick<SnapshotBody, "models" | "profiles">;
  private snapshot: Snapshot;

  /** `firstVersion` should grow across restarts: the aggregator's start time in ms. */
  constructor(
    private config: GatewayConfig,
    pools: readonly SnapshotPool[],
    firstVersion: number,
    now: number,
  ) {
    this.frame = modelsAndProfiles(config);
    for (const pool of pools) for (const pod of pool.pods) pod.updateEntry(now, config.aggregator.staleAfterMs);
    this.snapshot = firstSnapshot(this.body(pools), firstVersion, now);
  }

  /** A reload's config: its models and profiles frame every snapshot from the next one on. */
  reconfigure(config: GatewayConfig): void {
    this.config = config;
    this.frame = modelsAndProfiles(config);
  }

  get current(): Snapshot {
    return this.snapshot;
  }

  /** A new snapshot if an entry or, with `membersChanged`, a pool's pod set changed; else null. */
  next(pools: readonly SnapshotPool[], membersChanged: boolean, now: number): Built | null {
    let oldestChangeMs = membersChanged ? now : Infinity;
    for (const pool of pools) {
      for (const pod of pool.pods) {
        const changedAt = pod.updateEntry(now, this.config.aggregator.staleAfterMs);
        if (changedAt !== null && changedAt < oldestChangeMs) oldestChangeMs = changedAt;
      }
    }
    if (oldestChangeMs === Infinity) return null;
    this.snapshot = nextSnapshot(this.snapshot, this.body(pools), now);
    return { snapshot: this.snapshot, oldestChangeMs };
  }

  private body(pools: readonly SnapshotPool[]): SnapshotBody {
    return { ...this.frame, pools: pools.map((pool) => poolMsg(pool.config, Array.from(pool.pods, (pod) => pod.entry))) };
  }
}
