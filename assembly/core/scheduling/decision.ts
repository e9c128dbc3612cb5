// What the router decided for the request at hand, and the pick that fills it
// in. A new request (router.ts) and a held one released later
// (held-dispatch.ts) end in the same pick and the same accounting, so both
// build on this class; callers read the results off the Router.
import { PoolLoad } from "../fleet/pool-load";
import { explainPick } from "./explain";
import { InflightTable } from "../fleet/inflight";
import { Picker } from "./picker";
import { ReplicaPlace } from "./replica-lean";
import { DecisionLog } from "../prefix/decision-log";
import { PrefixDecision, PrefixIndex } from "../prefix/prefix-index";
import { Priority } from "../fleet/priority";
import { ApiError } from "../openai/errors";
import { RouteRequest } from "../scorers/route-request";
import { Endpoint, ModelRoute, Pool, prefillShare, Snapshot, Split } from "../fleet/snapshot";
import { ViewPolicy } from "../fleet/view";

/** Why a request is refused when the view is too old to route on (StaleViewPolicy.Reject). */
export const LOST_VIEW = "The gateway has lost its view of the model servers; retry shortly";

export abstract class Decision {
  /**
   * Where prompt prefixes (and adapters) probably are; fed by this router's
   * decisions and, through the log, by other workers'.
   */
  readonly prefixes: PrefixIndex;
  protected picker: Picker;
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
  /** Per pool name, kept across snapshots: rates and booked retries outlive a snapshot. */
  private loads: Map<string, PoolLoad> = new Map();

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

  /** Picks among the prepared candidates and accounts for the choice. */
  protected pick(request: RouteRequest, inflight: InflightTable, explain: bool): void {
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
   * The request is in flight on `primary` until the caller releases it; a
   * stream's `tokens` of prefill until its first bytes (prefillTokens).
   */
  protected count(inflight: InflightTable, primary: Endpoint, tokens: i32 = 0): void {
    const streams = tokens > 0 ? 1 : 0;
    inflight.add(primary.addressHash, 1, streams, tokens);
    primary.inflight++;
    primary.prefilling += streams;
    primary.prefillTokens += tokens;
    this.prefillTokens = tokens;
  }

  protected loadFor(poolName: string): PoolLoad {
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
}
