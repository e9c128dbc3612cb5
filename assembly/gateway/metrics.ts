// The filter's view of the fleet as Envoy stats (names per stat-names.ts):
// snapshot installs, version and size; the view's age; per pool, its pods and
// how many of them have stale metrics or are ejected by the passive-health
// ledger. (How long decisions take is counted with the traffic, in
// traffic-stats.ts.)
//
// Gauges are process-wide in Envoy: every worker sets the same values (they
// all hold the same snapshot and shared ledger), and only values that moved
// are sent, at most once per GAUGE_PERIOD_MS, so a quiet tick stays cheap.
import { defineMetric, incrementMetric, MetricType, recordMetric } from "../abi/hostcalls";
import { Snapshot } from "../core/fleet/snapshot";
import { statName } from "./stat-names";

/** Longest a gauge waits to follow its value (the age grows every tick; Prometheus scrapes every few seconds). */
export const GAUGE_PERIOD_MS: u64 = 1_000;

/** A gauge that is only sent to Envoy when its value changes. */
class Gauge {
  private id: u32;
  private sent: i64 = -1;

  constructor(name: string) {
    this.id = defineMetric(MetricType.Gauge, name);
  }

  set(value: u64): void {
    if (<i64>value == this.sent) return;
    this.sent = <i64>value;
    recordMetric(this.id, value);
  }
}

class PoolGauges {
  pods: Gauge;
  stale: Gauge;
  ejected: Gauge;
  /** The pool is in the current snapshot. */
  present: bool = true;

  constructor(pool: string) {
    const labels = ["pool", pool];
    this.pods = new Gauge(statName("pool_pods", labels));
    this.stale = new Gauge(statName("pool_pods_stale", labels));
    this.ejected = new Gauge(statName("pool_pods_ejected", labels));
  }
}

export class FilterMetrics {
  private snapshotUpdates: u32 = defineMetric(MetricType.Counter, statName("snapshot_updates_total"));
  private snapshotEndpoints: Gauge = new Gauge(statName("snapshot_endpoints"));
  /** The aggregator's version of the newest snapshot a worker loaded. */
  private snapshotVersion: Gauge = new Gauge(statName("snapshot_version"));
  /** Whole seconds since the aggregator was last heard from (a snapshot or a heartbeat), as /health's view_age_ms. */
  private snapshotAge: Gauge = new Gauge(statName("snapshot_age_seconds"));
  /** This Envoy's place among the replicas sharing through the control plane (0 sharing: alone). */
  private replicaIndex: Gauge = new Gauge(statName("replica_index"));
  private replicasSharing: Gauge = new Gauge(statName("replicas_sharing"));
  private pools: Map<string, PoolGauges> = new Map();
  /** Per worker (a gauge's value is the last writer's): what it holds now. */
  private heldRequests: Gauge | null = null;
  private heldBytes: Gauge | null = null;
  private dueMs: u64 = 0;

  /** A snapshot was installed: its figures now, and the pools' gauges at once. */
  installed(snap: Snapshot, nowMs: u64, heardMs: u64): void {
    incrementMetric(this.snapshotUpdates, 1);
    let endpoints = 0;
    for (let i = 0; i < snap.pools.length; i++) endpoints += snap.pools[i].endpoints.length;
    this.snapshotEndpoints.set(<u64>endpoints);
    this.snapshotVersion.set(snap.version);
    this.dueMs = 0;
    this.tick(snap, nowMs, heardMs);
  }

  /** On the refresh tick: at most once per GAUGE_PERIOD_MS, the view's age and each pool's pods. */
  tick(snap: Snapshot | null, nowMs: u64, heardMs: u64): void {
    if (nowMs < this.dueMs) return;
    this.dueMs = nowMs + GAUGE_PERIOD_MS;
    if (heardMs > 0) this.snapshotAge.set(nowMs > heardMs ? (nowMs - heardMs) / 1_000 : 0);
    if (snap != null) this.poolGauges(snap, nowMs);
  }

  /** On the refresh tick: the place the link last published (a host call only when it moved). */
  place(index: u32, count: u32): void {
    this.replicaIndex.set(<u64>index);
    this.replicasSharing.set(<u64>count);
  }

  /** What worker `worker` holds, after a tick that held anything. */
  held(worker: u32, requests: i32, bytes: i64): void {
    if (this.heldRequests == null) {
      const labels = ["worker", worker.toString()];
      this.heldRequests = new Gauge(statName("requests_held", labels));
      this.heldBytes = new Gauge(statName("requests_held_bytes", labels));
    }
    this.heldRequests!.set(<u64>requests);
    this.heldBytes!.set(<u64>bytes);
  }

  private poolGauges(snap: Snapshot, nowMs: u64): void {
    const gone = this.pools.values();
    for (let i = 0; i < gone.length; i++) gone[i].present = false;
    for (let p = 0; p < snap.pools.length; p++) {
      const pool = snap.pools[p];
      if (!this.pools.has(pool.name)) this.pools.set(pool.name, new PoolGauges(pool.name));
      const g = this.pools.get(pool.name);
      g.present = true;
      let stale = 0;
      let ejected = 0;
      for (let i = 0; i < pool.endpoints.length; i++) {
        const e = unchecked(pool.endpoints[i]);
        if (!e.fresh) stale++;
        if (e.ejectedUntilMs > nowMs) ejected++;
      }
      g.pods.set(<u64>pool.endpoints.length);
      g.stale.set(<u64>stale);
      g.ejected.set(<u64>ejected);
    }
    // A pool a new config removed has no pods left to report.
    for (let i = 0; i < gone.length; i++) {
      const g = gone[i];
      if (g.present) continue;
      g.pods.set(0);
      g.stale.set(0);
      g.ejected.set(0);
    }
  }
}
