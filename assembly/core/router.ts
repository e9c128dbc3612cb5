// The routing decision for one request body, shared verbatim by the Envoy
// filter and the native build: scan the body, resolve the model (or LoRA
// adapter) to its pool, judge the view's age, rank the pool's endpoints, and
// account for the choice (in-flight count, prefix index).
import { ApiError, badRequest, modelNotFound, unavailable } from "./errors";
import { FleetView } from "./fleet-view";
import { InflightTable } from "./inflight";
import { Picker } from "./picker";
import { PrefixDecision, PrefixIndex } from "./prefix-index";
import { BLOCK_BYTES } from "./prefix-keys";
import { ApiKind, OpenAIRequest } from "./request";
import { RouteRequest } from "./route-request";
import { adapterKey } from "./scorers/lora";
import { Endpoint, Pool } from "./snapshot";
import { StaleViewPolicy, ViewPolicy, viewIsStale } from "./view";

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
  /** The index of `pool` in the snapshot. */
  poolIndex: i32 = -1;
  /**
   * True when the view was too old to rank endpoints (StaleViewPolicy.FailOpen):
   * `ranked` is then empty and Envoy's own balancer picks among the pool's hosts.
   */
  blind: bool = false;
  /** This router's prefix decisions not yet shared with other workers: `pendingDecisions[0..pendingCount)`. */
  readonly pendingDecisions: PrefixDecision[] = [];
  pendingCount: i32 = 0;
  private matched: StaticArray<i32> = new StaticArray<i32>(0);

  constructor(seed: u64) {
    const prefixes = new PrefixIndex();
    this.prefixes = prefixes;
    this.picker = new Picker(seed, prefixes);
  }

  /** Best endpoint first, then fallbacks; empty when `blind`. */
  get ranked(): Endpoint[] {
    return this.picker.ranked;
  }

  /**
   * Decides where one request goes and counts it in `inflight` against the
   * chosen endpoint (the caller releases it when the request ends).
   */
  route(ptr: usize, len: i32, kind: ApiKind, view: FleetView, inflight: InflightTable, nowMs: u64): bool {
    if (!this.resolve(ptr, len, kind, view, nowMs)) return false;
    if (!this.blind) this.rank(inflight);
    return true;
  }

  /**
   * First half of route(): reads the body and finds the pool; false with
   * `error` set when the request must be refused. When it returns true and
   * the view is not `blind`, rank() must follow. (The filter reads the shared
   * in-flight table in between, and only then.)
   */
  resolve(ptr: usize, len: i32, kind: ApiKind, view: FleetView, nowMs: u64): bool {
    this.error = null;
    this.pool = null;
    this.poolIndex = -1;
    this.blind = false;
    this.picker.ranked.length = 0;
    const body = this.body;
    if (!body.read(ptr, len, kind)) return this.fail(badRequest(body.problem, body.problemParam));
    const snapshot = view.current;
    if (snapshot == null) return this.fail(unavailable("The gateway has no endpoint data yet; retry shortly"));
    const model = snapshot.find(body.model);
    if (model == null) return this.fail(modelNotFound(body.model));
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
    const request = this.request;
    request.model = model;
    request.pool = pool;
    request.nowMs = nowMs;
    return true;
  }

  /** Second half of route(): ranks the pool's endpoints and accounts for the choice. */
  rank(inflight: InflightTable): void {
    const request = this.request;
    const pool = request.pool;
    const model = request.model;
    const body = this.body;
    request.adapterHash = model.adapter.length > 0 ? model.nameHash : 0;
    const usePrefix = pool.weights.prefix > 0 && body.promptStart >= 0;
    if (usePrefix) request.prefix.compute(body.promptPtr(), body.promptEnd - body.promptStart, model.nameHash);
    else request.prefix.count = 0;
    observe(pool, inflight);
    this.picker.pick(pool, request);
    const primary = this.picker.ranked[0];
    inflight.add(primary.addressHash, 1);
    primary.inflight++;
    if (usePrefix && request.prefix.count > 0) this.recordPrefix(pool, primary);
    if (request.adapterHash != 0 && pool.weights.lora > 0) this.recordAdapter(primary);
  }

  /** The adapter is (about to be) loaded on `primary`: other requests for it, from any worker, should follow. */
  private recordAdapter(primary: Endpoint): void {
    const d = this.nextPending();
    d.endpoint = primary.addressHash;
    d.newBlocks = 0;
    d.count = 1;
    unchecked(d.keys[0] = adapterKey(this.request.adapterHash));
    this.prefixes.record(d);
  }

  /** Takes the decisions gathered since the last call (for the shared log); valid until the next route(). */
  drainPending(): i32 {
    const n = this.pendingCount;
    this.pendingCount = 0;
    return n;
  }

  private recordPrefix(pool: Pool, primary: Endpoint): void {
    const keys = this.request.prefix;
    if (this.matched.length != pool.endpoints.length) this.matched = new StaticArray<i32>(pool.endpoints.length);
    this.prefixes.match(keys, pool, this.matched);
    const promptBlocks = (keys.promptBytes + BLOCK_BYTES - 1) / BLOCK_BYTES;
    const cachedBlocks = keys.coveredBytes(unchecked(this.matched[primary.slot])) / BLOCK_BYTES;
    const d = this.nextPending();
    d.endpoint = primary.addressHash;
    d.newBlocks = <u32>(promptBlocks - cachedBlocks);
    d.count = keys.count;
    for (let k = 0; k < keys.count; k++) unchecked(d.keys[k] = keys.keys[k]);
    this.prefixes.record(d);
  }

  /** A reusable decision record; the oldest unshared ones are overwritten if nobody drains them. */
  private nextPending(): PrefixDecision {
    const list = this.pendingDecisions;
    if (this.pendingCount == MAX_PENDING) this.pendingCount = 0;
    if (this.pendingCount == list.length) list.push(new PrefixDecision());
    return unchecked(list[this.pendingCount++]);
  }

  private fail(e: ApiError): bool {
    this.error = e;
    return false;
  }
}

/** At most this many decisions wait for the next refresh tick to be shared. */
const MAX_PENDING: i32 = 256;

/** Copies the current in-flight counts onto the pool's endpoints, where the scorers read them. */
function observe(pool: Pool, inflight: InflightTable): void {
  const endpoints = pool.endpoints;
  for (let i = 0; i < endpoints.length; i++) {
    const e = unchecked(endpoints[i]);
    e.inflight = inflight.get(e.addressHash);
  }
}
