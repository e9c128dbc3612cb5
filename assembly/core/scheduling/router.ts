// The routing decision for one request body, shared verbatim by the Envoy
// filter and the native build: scan the body, resolve the model (or LoRA
// adapter, or canary target) to its pool, settle the request's class, judge
// the view's age, admit or refuse, rank the pool's endpoints, and account for
// the choice (in-flight count, prefix index).
import { hasRoom } from "./admission";
import { PoolLoad } from "../fleet/pool-load";
import { chooseSplit } from "./canary";
import { firstByteDeadlineMs } from "./deadline";
import { ApiError, badRequest, modelNotFound, saturated, unavailable } from "../openai/errors";
import { explainPick, explainRefusal } from "./explain";
import { FleetView } from "./fleet-view";
import { InflightTable } from "../fleet/inflight";
import { Picker } from "./picker";
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
  private log: DecisionLog;
  private meta: RequestMeta = new RequestMeta();
  /** Per pool name, kept across snapshots: rates and booked retries outlive a snapshot. */
  private loads: Map<string, PoolLoad> = new Map();

  constructor(seed: u64) {
    const prefixes = new PrefixIndex();
    this.prefixes = prefixes;
    this.log = new DecisionLog(prefixes);
    this.picker = new Picker(seed, prefixes);
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
  ): bool {
    return this.resolve(ptr, len, kind, view, nowMs, meta) && this.rank(inflight, refusals);
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
    const requested = snapshot.find(body.model);
    if (requested == null) return this.fail(modelNotFound(body.model));
    const split = chooseSplit(requested);
    const model = split == null ? requested : split.target!;
    const pool = snapshot.pools[model.pool];
    if (pool.endpoints.length == 0) return this.fail(unavailable("No endpoint serves model '" + body.model + "'"));
    if (viewIsStale(nowMs, view.heardMs, this.policy.maxAgeMs)) {
      if (this.policy.stalePolicy == StaleViewPolicy.Reject) {
        return this.fail(unavailable("The gateway has lost its view of the model servers; retry shortly"));
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
    request.prefillShare = prefillShare(<f64>promptBytes / 4);
    return true;
  }

  /**
   * Second half of route(): admits the request (false with a 429 `error` when
   * every eligible pod is saturated for its class), ranks the pool's
   * endpoints and accounts for the choice. `refusals` is consulted only when
   * the request finds no room.
   */
  rank(inflight: InflightTable, refusals: RefusalLedger): bool {
    const request = this.request;
    const pool = request.pool;
    const model = request.model;
    const body = this.body;
    observe(pool, inflight);
    if (this.blind) {
      this.picker.chooseBlind(pool, request.nowMs);
      if (this.picker.ranked.length > 0) this.count(inflight, this.picker.ranked[0]);
      return true;
    }
    const n = this.picker.prepare(pool, request);
    // Only fresh metrics can justify a refusal; without them the pool fails open.
    if (n > 0 && this.picker.trusted && model.profile.admission.enabled && !this.admit(n, refusals)) return false;
    request.adapterHash = model.adapter.length > 0 ? model.nameHash : 0;
    const weights = request.weights;
    const usePrefix = body.promptStart >= 0 && this.picker.weighs(weights, true);
    if (usePrefix) request.prefix.compute(body.promptPtr(), body.promptEnd - body.promptStart, model.nameHash);
    else request.prefix.count = 0;
    const explain = this.meta.explain;
    request.serial++;
    request.cachedBytes = 0;
    this.picker.choose(request, explain);
    const primary = this.picker.ranked[0];
    this.count(inflight, primary);
    this.picker.record(primary, request, this.log);
    // The pool's typical prefill is what its pods compute: a prompt's part already cached costs nothing.
    pool.load!.observeShare(prefillShare(<f64>max(request.promptBytes - request.cachedBytes, 0) / 4));
    if (explain) this.explanation = explainPick(this.picker, this.requested!, model, this.priority, this.retried);
    return true;
  }

  /**
   * True when some candidate has room for the request's class, or within its
   * retry limit if it retries a refused request; otherwise books a retry,
   * remembers the body and sets the 429.
   */
  private admit(n: i32, refusals: RefusalLedger): bool {
    const request = this.request;
    const admission = request.model.profile.admission;
    const candidates = this.picker.candidateList;
    const load = request.pool.load!;
    const nowMs = request.nowMs;
    const share = load.typicalShare;
    if (hasRoom(admission, candidates, n, share, this.priority)) {
      // Room even for the lowest class: the retries booked so far start draining.
      if (load.saturated && hasRoom(admission, candidates, n, share, Priority.Sheddable)) load.markRoom(nowMs, n);
      return true;
    }
    const hash = this.body.bodyHash();
    if (refusals.take(hash, nowMs) && hasRoom(admission, candidates, n, share, this.priority, true)) {
      load.retried();
      this.retried = true;
      return true;
    }
    this.retryAfterS = load.refuse(nowMs, n, admission.maxRetryAfterS);
    // The retries booked ahead of this one (refuse() drained the old ones and added this one).
    const booked = load.booked - 1;
    const dueMs = nowMs + <u64>this.retryAfterS * 1000;
    refusals.remember(hash, dueMs - RETRY_EARLY_MS, dueMs + RETRY_GRACE_MS, nowMs);
    this.error = saturated(request.pool.name, priorityName(this.priority), this.retryAfterS);
    if (this.meta.explain) {
      this.explanation = explainRefusal(request.pool, request.model, this.priority, booked, load.spareRate(nowMs, n), this.retryAfterS);
    }
    return false;
  }

  /** The request is in flight on `primary` until the caller releases it. */
  private count(inflight: InflightTable, primary: Endpoint): void {
    inflight.add(primary.addressHash, 1);
    primary.inflight++;
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

/** A retry this late after its Retry-After still counts as one (clients round, queue and reconnect). */
const RETRY_GRACE_MS: u64 = 15_000;
/** ...and this early (clock granularity, a client's timer firing a little soon). */
const RETRY_EARLY_MS: u64 = 250;


/** Copies the current in-flight counts onto the pool's endpoints, where the scorers read them. */
function observe(pool: Pool, inflight: InflightTable): void {
  const endpoints = pool.endpoints;
  for (let i = 0; i < endpoints.length; i++) {
    const e = unchecked(endpoints[i]);
    e.inflight = inflight.get(e.addressHash);
  }
}
