// The routing decision for one request body, shared verbatim by the Envoy
// filter and the native build: scan the body, resolve the model (or LoRA
// adapter, or canary target) to its pool, settle the request's class, judge
// the view's age, admit, hold or refuse, rank the pool's endpoints, and
// account for the choice (in-flight count, prefix index). The results and the
// pick are decision.ts's, releasing held requests is held-dispatch.ts's.
import { chooseSplit } from "./canary";
import { firstByteDeadlineMs } from "./deadline";
import { ApiError, badRequest, modelNotFound, unavailable } from "../openai/errors";
import { explainQueueRefusal, explainRefusal } from "./explain";
import { LOST_VIEW } from "./decision";
import { HeldDispatch } from "./held-dispatch";
import { HeldRequest } from "../queueing/held-request";
import { PoolQueue } from "../queueing/pool-queue";
import { FleetView } from "./fleet-view";
import { InflightTable } from "../fleet/inflight";
import { ApiKind, OpenAIRequest } from "../openai/request";
import { BAD_PRIORITY, effectivePriority, NO_PRIORITY, Priority } from "../fleet/priority";
import { RefusalLedger } from "../fleet/refusals";
import { RouteRequest } from "../scorers/route-request";
import { prefillShare } from "../fleet/snapshot";
import { StaleViewPolicy, viewIsStale } from "../fleet/view";

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

export class Router extends HeldDispatch {
  readonly body: OpenAIRequest = new OpenAIRequest();
  private request: RouteRequest = new RouteRequest();
  private meta: RequestMeta = new RequestMeta();

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
   * Books the request's retry (its Retry-After: its turn after the `ahead`
   * held requests and the retries booked before it, at `drain` a second),
   * remembers its body so the retry is known, and sets the 429.
   */
  private refuse(refusals: RefusalLedger, hash: u64, ahead: i32, drain: f64): void {
    const request = this.request;
    this.refuseFor(request.pool, request.model, this.priority, refusals, hash, ahead, drain, request.nowMs);
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

  private fail(e: ApiError): bool {
    this.error = e;
    return false;
  }
}
