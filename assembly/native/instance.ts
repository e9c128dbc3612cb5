// The native build's one instance (one simulated Envoy worker): the state
// every group of exports reads, and the exports that set it. Its variables
// are assigned only here (reset() and the setters); the other modules of
// assembly/native/ read them.
import { Router } from "../core/scheduling/router";
import { StaleViewPolicy } from "../core/fleet/view";
import { HealthLedger, HealthRules } from "../core/fleet/health";
import { FleetView } from "../core/scheduling/fleet-view";
import { walkEveryTake } from "../core/scheduling/score-tree";
import { FULL_SCAN } from "../core/scheduling/shortlist";
import { InflightTable } from "../core/fleet/inflight";
import { FOREIGN_WRITER, isForeignWriter } from "../core/queueing/queue-board";
import { PrefixLogReader } from "../core/prefix/prefix-log";
import { mix64 } from "../core/wire/hash";
import { PoolLoad } from "../core/fleet/pool-load";
import { LocalRefusals } from "../core/fleet/refusals";

export let router = new Router(1);
export let view = new FleetView();
export let inflight = new InflightTable();
export let unpublished = new UnpublishedChanges();
export let refusals = new LocalRefusals();
export let health = new HealthLedger();
export let healthRules = new HealthRules();
export let logReader = new PrefixLogReader();
export let writer: u32 = 1;
/** Per pod, the pool (drain bookkeeping) its latest routed request was counted in. */
export let routedIn = new Map<u64, PoolLoad>();
// The filter passes Envoy's clock; the native build is told the time. By
// default the view was heard from just now, so routing is never blind.
export let nowMs: u64 = 1;
view.heardMs = 1;

/** Starts over: a new tie-break sequence for `seed`, no snapshot, counts, health or prefix history, the default health rules. */
export function reset(seed: u64): void {
  const policy = router.policy;
  router = new Router(seed);
  router.policy = policy;
  router.scoreWholeUpTo(scoreWholeUpTo);
  view = new FleetView();
  view.heardMs = nowMs;
  inflight = new InflightTable();
  unpublished = new UnpublishedChanges();
  refusals = new LocalRefusals();
  health = new HealthLedger();
  healthRules = new HealthRules();
  logReader = new PrefixLogReader();
  routedIn = new Map<u64, PoolLoad>();
  // Distinct seeds give distinct writer ids, so instances tell their records apart.
  writer = <u32>mix64(seed) | 1;
  // Other Envoys' summaries have writers of their own pattern on the queue board.
  if (isForeignWriter(writer)) writer &= ~FOREIGN_WRITER;
  router.writer = writer;
}

let scoreWholeUpTo: i32 = FULL_SCAN;

/** Pools with up to `pods` usable endpoints are scored whole, larger ones over their shortlist (kept across reset). */
export function setFullScan(pods: i32): void {
  scoreWholeUpTo = pods;
  router.scoreWholeUpTo(pods);
}

/** For tests of the shortlist: every pick walks its trees anew, keeping no list between picks (all instances). */
export function setShortlistWalks(always: bool): void {
  walkEveryTake(always);
}

/** This instance's id on the queue board, as the filter's worker id (reset() derives one from the seed). */
export function setWriter(id: u32): void {
  writer = id;
  router.writer = id;
}

/** Sets the clock and when the aggregator was last heard from (0 = never). */
export function setClock(now: u64, heard: u64): void {
  nowMs = now;
  view.heardMs = heard;
}

/** Sets how old the view may get and what to do past that (0 fail open, 1 reject). */
export function setViewPolicy(maxAgeMs: u64, stalePolicy: i32): void {
  router.policy.maxAgeMs = maxAgeMs;
  router.policy.stalePolicy = <StaleViewPolicy>stalePolicy;
}

/** The passive-health ledger's rules, as the filter's config sets them (gateway.passiveHealth). */
export function setHealthRules(ejectAfter: u32, ejectMs: u64, saturatedBackoffMs: u64): void {
  healthRules = new HealthRules();
  healthRules.threshold = ejectAfter;
  healthRules.ejectMs = ejectMs;
  healthRules.saturatedBackoffMs = saturatedBackoffMs;
}

/** This instance's place among the replicas sharing (the snapshot cell's, read on the tick); count 0 or 1: alone. */
export function setReplicaPlace(index: u32, count: u32): void {
  router.place.set(index, count);
}

/** Bounds the held requests (the filter's max_queued_bytes, max_queued_requests). */
export function setHoldLimits(maxBytes: i64, maxRequests: i32): void {
  router.holds.maxBytes = maxBytes;
  router.holds.maxRequests = maxRequests;
}

/**
 * This instance's in-flight releases (a request's end), as the filter keeps
 * them (gateway/shared-inflight.ts): applied to its own table at once and
 * whenever it loads the shared one, and published with its next write (a
 * routed request, a stream's first bytes) or its tick's flush.
 */
export class UnpublishedChanges {
  private hashes: u64[] = [];
  private changes: i32[] = [];
  /** Since setInflight(), the table was written (inflightTable() is then what the others must see). */
  published: bool = false;

  add(hash: u64, delta: i32, streams: i32, tokens: i32): void {
    inflight.add(hash, delta, streams, tokens);
    this.hashes.push(hash);
    this.changes.push(delta);
    this.changes.push(streams);
    this.changes.push(tokens);
  }

  applyTo(table: InflightTable): void {
    for (let i = 0; i < this.hashes.length; i++) {
      table.add(this.hashes[i], this.changes[i * 3], this.changes[i * 3 + 1], this.changes[i * 3 + 2]);
    }
  }

  get count(): i32 {
    return this.hashes.length;
  }

  publish(): void {
    this.hashes.length = 0;
    this.changes.length = 0;
    this.published = true;
  }
}
