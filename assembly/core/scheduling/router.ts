// The routing decision for one request body, shared verbatim by the Envoy
// filter and the native build: scan the body, resolve the model (or LoRA
// adapter, or canary target) to its pool, settle the request's class, judge
// the view's age, admit or refuse, rank the pool's endpoints, and account for
// the choice (in-flight count, prefix index).
import { PoolLoad } from "../fleet/pool-load";
import { chooseSplit } from "./canary";
import { firstByteDeadlineMs } from "./deadline";
import { ApiError, badRequest, modelNotFound, saturated, unavailable } from "../openai/errors";
import { explainPick, explainQueueRefusal, explainRefusal } from "./explain";
import { HeldRequest } from "../queueing/held-request";
import { HoldQueues, PoolQueue, serviceRank } from "../queueing/pool-queue";
import { QueueBoard } from "../queueing/queue-board";
import { FleetView } from "./fleet-view";
import { InflightTable } from "../fleet/inflight";
import { Picker } from "./picker";
import { ReplicaPlace } from "./replica-lean";
import { DecisionLog } from "../prefix/decision-log";
import { PrefixDecision, PrefixIndex } from "../prefix/prefix-index";
import { ApiKind, OpenAIRequest } from "../openai/request";
import { BAD_PRIORITY, effectivePriority, NO_PRIORITY, Priority, priorityName } from "../fleet/priority";
import { RefusalLedger } from "../fleet/refusals";
import { RouteRequest } from "../scorers/route-request";
import { Endpoint, ModelRoute, Pool, prefillShare, Snapshot, Split } from "../fleet/snapshot";
import { StaleViewPolicy, ViewPolicy, viewIsStale } from "../fleet/view";

/** What the caller knows about a request besides its body (from its headers and the gateway's config). */
export class RequestMeta {
  /** The class the request asks for: a Priority, NO_PRIORITY or BAD_PRIORITY. */
  priority: i32 = NO_PRIORITY;
  /** The client may claim Critical (config: anyone, or a trusted JWT claim). */
  mayClaimCritical: bool = false;
  /** Explain the decision in `Router.explanation`. */
  explain: bool = false;
  /** The caller's handle for the request should it be held (0: it cannot be, refuse instead). */
  holdId: u32 = 0;
  /** Hash of the tenant the request is from (0: no tenant known; all such share one turn). */
  tenant: u64 = 0;
  /** The client's own bound on its wait in the gateway, ms (-1: none); only ever tightens its class's budget. */
  maxWaitMs: i64 = -1;
  /** The body's size, counted against the held-bytes bound while it is held. */
  bytes: i32 = 0;
}

/** What rank() made of a request. */
export const enum Verdict { Routed = 0, Held = 1, Refused = 2 }

/** Told of each held request pump() dispatches or refuses. */
export abstract class HoldSink {
  abstract dispatched(h: HeldRequest): void;
  abstract refused(h: HeldRequest): void;
}

export class Router {
  readonly body: OpenAIRequest = new OpenAIRequest();
  /**
   * Where prompt prefixes (and adapters) probably are; fed by this router's
   * decisions and, through the log, by other workers'.
   */
  readonly prefixes: PrefixIndex;
  private request: RouteRequest = new RouteRequest();
  private picker: Picker;
  policy: ViewPolicy = new ViewPolicy();
  /** Set when route() returns false. */
  error: ApiError | null = null;
  /** Set when route() returns true: the pool that serves the model. */
  pool: Pool | null = null;
  /** The model the client asked for, and the one served (they differ after a canary split). */
  requested: ModelRoute | null = null;
  target: ModelRoute | null = null;
  /** The canary split taken, if the requested model has splits. */
  split: Split | null = null;
  /** The class the request is served at. */
  priority: Priority = Priority.Standard;
  /** The request asked for Critical and may not claim it. */
  downgraded: bool = false;
  /** Set when the request was refused for lack of room (error 429): the Retry-After in seconds. */
  retryAfterS: u32 = 0;
  /** The request was a retry of a refused one and got in on the next class's limit. */
  retried: bool = false;
  /** With RequestMeta.explain: the decision in words (header-safe ASCII). */
  explanation: string = "";
  /** The index of `pool` in the snapshot. */
  poolIndex: i32 = -1;
  /**
   * True when the view was too old to score endpoints (StaleViewPolicy.FailOpen):
   * `ranked` then holds the pods last known good, least busy first (Picker.chooseBlind).
   */
  blind: bool = false;
  /** Set when resolve() returns true: the per-try deadline to the first byte in ms (core/scheduling/deadline.ts), 0 for none. */
  deadlineMs: u32 = 0;
  /**
   * Set with `ranked`: the prompt tokens counted as the pick's prefill until
   * its first bytes, which the caller then takes off (InflightTable.add);
   * 0 for a request that is not a stream (its first bytes are its end).
   */
  prefillTokens: i32 = 0;
  private log: DecisionLog;
  private meta: RequestMeta = new RequestMeta();
  /** Per pool name, kept across snapshots: rates and booked retries outlive a snapshot. */
  private loads: Map<string, PoolLoad> = new Map();
  /** This worker's held requests, per pool and class. */
  readonly holds: HoldQueues = new HoldQueues();
  /** What every worker holds, as the caller last read it from shared data. */
  board: QueueBoard = new QueueBoard();
  /** This worker's id on the board. */
  writer: u32 = 1;
  /** When held requests are next checked for passed deadlines. */
  private sweepMs: u64 = 0;

  constructor(seed: u64) {
    const prefixes = new PrefixIndex();
    this.prefixes = prefixes;
    this.log = new DecisionLog(prefixes);
    this.picker = new Picker(seed, prefixes);
  }

  /** Pools with up to `pods` usable endpoints are scored whole; larger ones over a shortlist (core/scheduling/shortlist.ts). */
  scoreWholeUpTo(pods: i32): void {
    this.picker.fullScanUpTo = pods;
  }

  /** This gateway's place among the replicas sharing through the control plane (none: alone). */
  get place(): ReplicaPlace {
    return this.picker.place;
  }

  /** The endpoints the last pick scored: the pool's usable ones, or its shortlist. */
  get candidates(): Endpoint[] {
    return this.picker.candidateList;
  }

  /** Best endpoint first, then fallbacks; may be empty when `blind`. */
  get ranked(): Endpoint[] {
    return this.picker.ranked;
  }

  /**
   * Decides where one request goes and counts it in `inflight` against the
   * chosen endpoint (the caller releases it when the request ends).
   */
  route(
    ptr: usize, len: i32, kind: ApiKind, view: FleetView, inflight: InflightTable, refusals: RefusalLedger, nowMs: u64, meta: RequestMeta,
  ): Verdict {
    return this.resolve(ptr, len, kind, view, nowMs, meta) ? this.rank(inflight, refusals) : Verdict.Refused;
  }

  /**
   * First half of route(): reads the body, finds the pool and settles the
   * class; false with `error` set when the request must be refused. When it
   * returns true, rank() must follow. (The filter reads the shared in-flight
   * table in between, and only then.)
   */
  resolve(ptr: usize, len: i32, kind: ApiKind, view: FleetView, nowMs: u64, meta: RequestMeta): bool {
    this.error = null;
    this.pool = null;
    this.poolIndex = -1;
    this.requested = null;
    this.target = null;
    this.split = null;
    this.blind = false;
    this.deadlineMs = 0;
    this.downgraded = false;
    this.retryAfterS = 0;
    this.retried = false;
    this.explanation = "";
    this.meta = meta;
    this.picker.ranked.length = 0;
    if (meta.priority == BAD_PRIORITY) {
      return this.fail(badRequest("The x-llm-priority header must be critical, standard or sheddable", "x-llm-priority"));
    }
    const body = this.body;
    if (!body.read(ptr, len, kind)) return this.fail(badRequest(body.problem, body.problemParam));
    const snapshot = view.current;
    if (snapshot == null) return this.fail(unavailable("The gateway has no endpoint data yet; retry shortly"));
    const requested = body.modelEscaped ? snapshot.find(body.model) : snapshot.findBytes(body.modelPtr, body.modelLen);
    if (requested == null) return this.fail(modelNotFound(body.model));
    const split = chooseSplit(requested);
    const model = split == null ? requested : split.target!;
    const pool = snapshot.pools[model.pool];
    if (pool.endpoints.length == 0) return this.fail(unavailable("No endpoint serves model '" + body.model + "'"));
    if (viewIsStale(nowMs, view.heardMs, this.policy.maxAgeMs)) {
      if (this.policy.stalePolicy == StaleViewPolicy.Reject) {
        return this.fail(unavailable(LOST_VIEW));
      }
      this.blind = true;
    }
    this.pool = pool;
    this.poolIndex = model.pool;
    this.requested = requested;
    this.target = model;
    this.split = split;
    this.priority = effectivePriority(meta.priority, requested.priority, meta.mayClaimCritical);
    this.downgraded = (meta.priority == Priority.Critical || (meta.priority < 0 && requested.priority == Priority.Critical)) &&
      this.priority != Priority.Critical;
    if (pool.load == null) pool.load = this.loadFor(pool.name);
    const promptBytes = body.promptStart >= 0 ? body.promptEnd - body.promptStart : 0;
    this.deadlineMs = firstByteDeadlineMs(model.profile.deadlines, promptBytes, body.stream, body.maxTokens);
    const request = this.request;
    request.model = model;
    request.weights = model.profile.weights;
    request.priority = this.priority;
    request.pool = pool;
    request.nowMs = nowMs;
    request.promptBytes = promptBytes;
    request.stream = body.stream;
    request.prefillShare = prefillShare(<f64>promptBytes / 4);
    return true;
  }

  /**
   * Second half of route(): admits the request, holds it (Verdict.Held: the
   * caller pauses it until pump() dispatches or refuses it) or refuses it
   * (a 429 `error`), ranks the pool's endpoints and accounts for the choice.
   * `refusals` is consulted only when the request finds no room and its class
   * is never held.
   */
  rank(inflight: InflightTable, refusals: RefusalLedger): Verdict {
    const request = this.request;
    const pool = request.pool;
    const model = request.model;
    const body = this.body;
    this.picker.observe(pool, inflight, request.nowMs);
    if (this.blind) {
      this.picker.chooseBlind(pool, request.nowMs);
      if (this.picker.ranked.length > 0) this.count(inflight, this.picker.ranked[0]);
      return Verdict.Routed;
    }
    request.adapterHash = model.adapter.length > 0 ? model.nameHash : 0;
    // Computed before admission (a held request keeps its keys: the body is not readable when it is dispatched) and
    // before the candidates (a prefix's holders are among them).
    if (body.promptStart >= 0 && this.picker.weighs(request.weights, true)) {
      request.prefix.compute(body.promptPtr(), body.promptEnd - body.promptStart, model.nameHash);
    } else {
      request.prefix.count = 0;
    }
    const n = this.picker.prepare(pool, request);
    // Only fresh metrics can justify holding or refusing; without them the pool fails open.
    if (n > 0 && this.picker.trusted && model.profile.admission.enabled) {
      const verdict = this.admit(n, refusals);
      if (verdict != Verdict.Routed) return verdict;
    }
    this.pick(request, inflight, this.meta.explain);
    return Verdict.Routed;
  }

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

  /** Picks among the prepared candidates and accounts for the choice. */
  private pick(request: RouteRequest, inflight: InflightTable, explain: bool): void {
    request.cachedBytes = 0;
    this.picker.choose(request, explain);
    const primary = this.picker.ranked[0];
    this.picker.record(primary, request, this.log);
    // What the pod will compute: a prompt's part already cached costs nothing.
    const uncachedTokens = max(request.promptBytes - request.cachedBytes, 0) / 4;
    this.count(inflight, primary, request.stream ? uncachedTokens : 0);
    request.pool.load!.observeShare(prefillShare(<f64>uncachedTokens));
    if (explain) this.explanation = explainPick(this.picker, this.requested!, request.model, this.priority, this.retried);
  }

  /**
   * Routed when some candidate has room for the request's class and nothing
   * held is served before it. Otherwise held when its class has a wait
   * budget and its predicted wait fits in it (or it is a retry that came
   * back as told), else refused. A class without a budget is refused at once,
   * and its retry admitted within the retry limit.
   */
  private admit(n: i32, refusals: RefusalLedger): Verdict {
    const request = this.request;
    const admission = request.model.profile.admission;
    const picker = this.picker;
    const pool = request.pool;
    const load = pool.load!;
    const nowMs = request.nowMs;
    const share = load.typicalShare;
    const meta = this.meta;
    const budget = meta.holdId != 0 ? admission.waitBudget(this.priority, meta.maxWaitMs) : 0;
    const ahead = budget > 0 ? this.heldAhead(pool.name, pool.nameHash, this.priority, nowMs) : 0;
    if (ahead == 0 && picker.hasRoom(admission, share, this.priority, nowMs)) return Verdict.Routed;
    const hash = this.body.bodyHash();
    const retry = refusals.take(hash, nowMs);
    const own = load.drainRate(nowMs, n);
    const drain = this.poolDrain(pool, own, nowMs);
    if (budget > 0) {
      const q = this.holds.pool(pool.name, pool.nameHash);
      // What this worker publishes on the board for the others' estimates.
      q.drain = own;
      const waitMs = load.waitMs(nowMs, ahead, drain);
      const full = !this.holds.fits(meta.bytes);
      if (!full && (retry || waitMs <= <f64>budget)) {
        this.hold(q, budget, drain, retry, hash);
        return Verdict.Held;
      }
      this.refuse(refusals, hash, ahead, drain);
      if (meta.explain) {
        this.explanation = explainQueueRefusal(pool, request.model, this.priority, full, ahead, waitMs, budget, this.retryAfterS);
      }
      return Verdict.Refused;
    }
    if (retry && picker.hasRoom(admission, share, this.priority, nowMs, true)) {
      this.retried = true;
      return Verdict.Routed;
    }
    // The retries booked ahead of this one, before refuse() books it.
    const booked = meta.explain ? load.booked(nowMs) : 0;
    this.refuse(refusals, hash, 0, drain);
    if (meta.explain) this.explanation = explainRefusal(pool, request.model, this.priority, booked, drain, this.retryAfterS);
    return Verdict.Refused;
  }

  /**
   * Completions a second in the pool: this worker's (`own`, measured) plus
   * what the other workers and replicas that hold for it measure theirs.
   */
  private poolDrain(pool: Pool, own: f64, nowMs: u64): f64 {
    return own + (this.board.busy ? this.board.othersDrain(pool.nameHash, this.writer, nowMs) : 0);
  }

  /**
   * Books the request's retry (its Retry-After: its turn after the `ahead`
   * held requests and the retries booked before it, at `drain` a second),
   * remembers its body so the retry is known, and sets the 429.
   */
  private refuse(refusals: RefusalLedger, hash: u64, ahead: i32, drain: f64): void {
    const request = this.request;
    this.refuseFor(request.pool, request.model, this.priority, refusals, hash, ahead, drain, request.nowMs);
  }

  private refuseFor(pool: Pool, model: ModelRoute, p: Priority, refusals: RefusalLedger, hash: u64, ahead: i32, drain: f64, nowMs: u64): void {
    this.retryAfterS = pool.load!.refuse(nowMs, ahead, drain, model.profile.admission.maxRetryAfterS);
    const dueMs = nowMs + <u64>this.retryAfterS * 1000;
    refusals.remember(hash, dueMs - RETRY_EARLY_MS, dueMs + RETRY_GRACE_MS, nowMs);
    this.error = saturated(pool.name, priorityName(p), this.retryAfterS);
  }

  /** Requests held for the pool, by this worker and the others, that are served before a new one of class `p`. */
  private heldAhead(name: string, nameHash: u64, p: Priority, nowMs: u64): i32 {
    let ahead = 0;
    if (this.holds.count > 0) ahead += this.holds.pool(name, nameHash).ahead(p);
    if (this.board.busy) ahead += this.board.othersAhead(nameHash, serviceRank(p), this.writer, nowMs);
    return ahead;
  }

  /**
   * Queues the request in `q` until `budgetMs` from now; the pool releases
   * about `drain` requests a second. A retry that came back as told is
   * placed as if it had waited its budget already: ahead of what arrived
   * since it was refused. `bodyHash` is the body's, for its refusal's memory.
   */
  private hold(q: PoolQueue, budgetMs: u64, drain: f64, retry: bool, bodyHash: u64): void {
    const request = this.request;
    const meta = this.meta;
    const nowMs = request.nowMs;
    const h = new HeldRequest();
    h.id = meta.holdId;
    h.tenant = meta.tenant;
    h.bytes = meta.bytes;
    h.heldMs = nowMs;
    h.arrivalMs = retry && nowMs > budgetMs ? nowMs - budgetMs : nowMs;
    h.deadlineMs = nowMs + budgetMs;
    h.requested = this.requested!;
    h.explain = meta.explain;
    h.body = bodyHash;
    h.request.copyFrom(request);
    this.holds.add(q, h, <u64>Math.ceil(1000 / drain), retry);
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

  /**
   * The request is in flight on `primary` until the caller releases it; a
   * stream's `tokens` of prefill until its first bytes (prefillTokens).
   */
  private count(inflight: InflightTable, primary: Endpoint, tokens: i32 = 0): void {
    const streams = tokens > 0 ? 1 : 0;
    inflight.add(primary.addressHash, 1, streams, tokens);
    primary.inflight++;
    primary.prefilling += streams;
    primary.prefillTokens += tokens;
    this.prefillTokens = tokens;
  }

  private loadFor(poolName: string): PoolLoad {
    if (this.loads.has(poolName)) return this.loads.get(poolName);
    const load = new PoolLoad();
    this.loads.set(poolName, load);
    return load;
  }

  /** Takes the decisions gathered since the last call (for the shared log); valid until the next route(). */
  drainPending(): i32 {
    return this.log.drain();
  }

  /** This router's prefix decisions not yet shared with other workers: `pendingDecisions[0..pendingCount)`. */
  get pendingDecisions(): PrefixDecision[] {
    return this.log.pending;
  }

  get pendingCount(): i32 {
    return this.log.count;
  }

  /** Some model of `snap` weighs a scorer that records its picks: only then has this router decisions to share. */
  recordsPicks(snap: Snapshot): bool {
    for (let i = 0; i < snap.models.length; i++) {
      if (this.picker.weighs(snap.models[i].profile.weights, false)) return true;
    }
    return false;
  }

  private fail(e: ApiError): bool {
    this.error = e;
    return false;
  }
}

const LOST_VIEW = "The gateway has lost its view of the model servers; retry shortly";

/** Held requests are checked for passed deadlines this often (the queue heads at every pump). */
const SWEEP_MS: u64 = 100;

/** A retry this late after its Retry-After still counts as one (clients round, queue and reconnect). */
const RETRY_GRACE_MS: u64 = 15_000;
/** ...and this early (clock granularity, a client's timer firing a little soon). */
const RETRY_EARLY_MS: u64 = 250;
