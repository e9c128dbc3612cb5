// The router's side for requests it holds: the tick's pump dispatches them as
// their pool has room again (choosing each one's pod then: late binding) and
// refuses those past their wait budget, and a refusal books its retry. Kept
// apart from router.ts, which decides a new request; it builds on this class
// to hold one, to count what is held ahead of it and to refuse it.
import { saturated, unavailable } from "../openai/errors";
import { Decision, LOST_VIEW } from "./decision";
import { HeldRequest } from "../queueing/held-request";
import { HoldQueues, PoolQueue, serviceRank } from "../queueing/pool-queue";
import { QueueBoard } from "../queueing/queue-board";
import { FleetView } from "./fleet-view";
import { InflightTable } from "../fleet/inflight";
import { Priority, priorityName } from "../fleet/priority";
import { RefusalLedger } from "../fleet/refusals";
import { ModelRoute, Pool, Snapshot } from "../fleet/snapshot";
import { StaleViewPolicy, viewIsStale } from "../fleet/view";

/** Told of each held request pump() dispatches or refuses. */
export abstract class HoldSink {
  abstract dispatched(h: HeldRequest): void;
  abstract refused(h: HeldRequest): void;
}

export abstract class HeldDispatch extends Decision {
  /** This worker's held requests, per pool and class. */
  readonly holds: HoldQueues = new HoldQueues();
  /** What every worker holds, as the caller last read it from shared data. */
  board: QueueBoard = new QueueBoard();
  /** This worker's id on the board. */
  writer: u32 = 1;
  /** When held requests are next checked for passed deadlines. */
  private sweepMs: u64 = 0;

  /**
   * Dispatches held requests whose pool has room again, in class order and
   * fairly between tenants, choosing each one's pod now (late binding), and
   * refuses those past their deadline. For each, `sink` is told while this
   * router's results (ranked, pool, target, explanation; error and
   * retryAfterS for a refusal) are that request's.
   */
  pump(view: FleetView, inflight: InflightTable, refusals: RefusalLedger, sink: HoldSink, nowMs: u64): void {
    const holds = this.holds;
    if (holds.count == 0) return;
    if (nowMs >= this.sweepMs) {
      this.sweepMs = nowMs + SWEEP_MS;
      const expired = holds.expired(nowMs);
      for (let i = 0; i < expired.length; i++) this.refuseHeld(expired[i], refusals, sink, nowMs);
    }
    const snap = view.current;
    // As for a new request: a view too old to score on is rejected, or routed blind.
    const stale = viewIsStale(nowMs, view.heardMs, this.policy.maxAgeMs);
    const rejectStale = stale && this.policy.stalePolicy == StaleViewPolicy.Reject;
    const queues = holds.busyPools();
    for (let i = 0; i < queues.length; i++) {
      const q = queues[i];
      const found: Pool | null = snap == null ? null : snap!.poolNamed(q.name);
      if (found == null || found.endpoints.length == 0 || rejectStale) {
        this.refuseAll(q, sink, rejectStale ? LOST_VIEW : "");
        continue;
      }
      const pool = found!;
      for (let guard = q.count; guard > 0; guard--) {
        const h = q.next();
        if (h == null) break;
        if (!this.rebind(h, snap!, pool)) {
          holds.popNext(q, h);
          this.refuseGone(h, sink, "");
          continue;
        }
        if (stale) {
          holds.popNext(q, h);
          this.release(h, pool, inflight, sink, true);
          continue;
        }
        if (this.board.busy && this.board.othersFirst(q.nameHash, serviceRank(h.request.priority), h.tag, this.writer, nowMs)) break;
        const r = h.request;
        r.nowMs = nowMs;
        this.picker.observe(pool, inflight, nowMs);
        const n = this.picker.prepare(pool, r);
        if (n == 0) break;
        const admission = r.model.profile.admission;
        if (this.picker.trusted && admission.enabled && !this.picker.hasRoom(admission, pool.load!.typicalShare, r.priority, nowMs)) {
          q.drain = pool.load!.drainRate(nowMs, n);
          break;
        }
        holds.popNext(q, h);
        this.release(h, pool, inflight, sink, false);
      }
    }
  }

  /** Sends a held request on: this router's results become its, on its pool's current pods (ranked, or blind). */
  private release(h: HeldRequest, pool: Pool, inflight: InflightTable, sink: HoldSink, blind: bool): void {
    const r = h.request;
    this.pool = pool;
    this.poolIndex = r.model.pool;
    this.requested = h.requested;
    this.target = r.model;
    this.split = null;
    this.priority = r.priority;
    this.retried = false;
    this.explanation = "";
    this.blind = blind;
    if (blind) {
      this.picker.chooseBlind(pool, r.nowMs);
      if (this.picker.ranked.length > 0) this.count(inflight, this.picker.ranked[0]);
    } else {
      this.pick(r, inflight, h.explain);
    }
    sink.dispatched(h);
  }

  /** The pool a queue waits for has left the snapshot, or has no endpoint left: nothing held there can be served. */
  private refuseAll(q: PoolQueue, sink: HoldSink, why: string): void {
    for (let h = q.next(); h != null; h = q.next()) {
      this.holds.popNext(q, h);
      this.refuseGone(h, sink, why);
    }
  }

  /** 503 for a held request that cannot be served now: `why`, or by default that its pool is gone. */
  private refuseGone(h: HeldRequest, sink: HoldSink, why: string): void {
    this.error = unavailable(why.length > 0 ? why : "No endpoint serves model '" + h.requested.name + "' any more");
    this.retryAfterS = 0;
    this.explanation = "";
    sink.refused(h);
  }

  /** A held request's client is gone: it leaves its queue at once. False if it was not held. */
  cancel(id: u32): bool {
    return this.holds.remove(id) != null;
  }

  /** Writes this worker's summary of every pool it has held for into `board` (read fresh by the caller). */
  publish(board: QueueBoard, nowMs: u64): void {
    const queues = this.holds.allPools();
    for (let i = 0; i < queues.length; i++) board.publish(this.writer, queues[i], queues[i].drain, nowMs);
  }

  /**
   * The view a held request is placed on is the one of its dispatch: its
   * model and pool as the current snapshot has them. False when the model
   * left the snapshot.
   */
  private rebind(h: HeldRequest, snap: Snapshot, pool: Pool): bool {
    const r = h.request;
    if (r.pool == pool) return true;
    const model = snap.find(r.model.name);
    if (model == null || snap.pools[model.pool] != pool) return false;
    const requested = snap.find(h.requested.name);
    h.requested = requested != null ? requested : model;
    r.model = model;
    r.weights = model.profile.weights;
    r.pool = pool;
    if (pool.load == null) pool.load = this.loadFor(pool.name);
    return true;
  }

  /**
   * Completions a second in the pool: this worker's (`own`, measured) plus
   * what the other workers and replicas that hold for it measure theirs.
   */
  protected poolDrain(pool: Pool, own: f64, nowMs: u64): f64 {
    return own + (this.board.busy ? this.board.othersDrain(pool.nameHash, this.writer, nowMs) : 0);
  }

  /**
   * Books the request's retry (its Retry-After: its turn after the `ahead`
   * held requests and the retries booked before it, at `drain` a second),
   * remembers its body so the retry is known, and sets the 429.
   */
  protected refuseFor(pool: Pool, model: ModelRoute, p: Priority, refusals: RefusalLedger, hash: u64, ahead: i32, drain: f64, nowMs: u64): void {
    this.retryAfterS = pool.load!.refuse(nowMs, ahead, drain, model.profile.admission.maxRetryAfterS);
    const dueMs = nowMs + <u64>this.retryAfterS * 1000;
    refusals.remember(hash, dueMs - RETRY_EARLY_MS, dueMs + RETRY_GRACE_MS, nowMs);
    this.error = saturated(pool.name, priorityName(p), this.retryAfterS);
  }

  /** Requests held for the pool, by this worker and the others, that are served before a new one of class `p`. */
  protected heldAhead(name: string, nameHash: u64, p: Priority, nowMs: u64): i32 {
    let ahead = 0;
    if (this.holds.count > 0) ahead += this.holds.pool(name, nameHash).ahead(p);
    if (this.board.busy) ahead += this.board.othersAhead(nameHash, serviceRank(p), this.writer, nowMs);
    return ahead;
  }

  /** A held request past its deadline: 429, its retry booked behind what is still held ahead of it. */
  private refuseHeld(h: HeldRequest, refusals: RefusalLedger, sink: HoldSink, nowMs: u64): void {
    const r = h.request;
    const ahead = this.heldAhead(r.pool.name, r.pool.nameHash, r.priority, nowMs);
    const drain = this.poolDrain(r.pool, r.pool.load!.drainRate(nowMs, r.pool.endpoints.length), nowMs);
    this.refuseFor(r.pool, r.model, r.priority, refusals, h.body, ahead, drain, nowMs);
    this.explanation = h.explain ? "refused=wait_budget_exceeded; pool=" + r.pool.name + "; class=" + priorityName(r.priority) +
      "; held_ms=" + (nowMs - h.heldMs).toString() + "; retry_after_s=" + this.retryAfterS.toString() : "";
    sink.refused(h);
  }
}

/** Held requests are checked for passed deadlines this often (the queue heads at every pump). */
const SWEEP_MS: u64 = 100;

/** A retry this late after its Retry-After still counts as one (clients round, queue and reconnect). */
const RETRY_GRACE_MS: u64 = 15_000;
/** ...and this early (clock granularity, a client's timer firing a little soon). */
const RETRY_EARLY_MS: u64 = 250;
