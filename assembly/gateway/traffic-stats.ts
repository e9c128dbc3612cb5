// The filter's per-request counters: requests routed and tokens per pool and
// model, picks per pod, refusals by status and reason, admissions and
// refusals per class, canary targets, pod failures, removed client headers.
// All are counted in Wasm memory and handed to Envoy on the refresh tick
// (deferred-counters.ts), so a request pays no host call for them. Names and
// labels follow stat-names.ts; each counter's name is built once, the first
// time its labels are seen, and remembered on the snapshot object it counts
// (pod, model, split) or here (reason).
import { Priority, PRIORITY_COUNT, priorityName } from "../core/fleet/priority";
import { Endpoint, ModelRoute, Pool, Split } from "../core/fleet/snapshot";
import { Usage } from "../core/openai/usage";
import { DeferredCounters } from "./deferred-counters";
import { statName } from "./stat-names";

/** The counters of one served model, all labelled with its pool and name. */
class ModelCounters {
  routed: i32;
  blind: i32;
  tokensIn: i32;
  tokensOut: i32;

  constructor(c: DeferredCounters, pool: string, model: string) {
    const labels = ["pool", pool, "model", model];
    this.routed = c.index(statName("requests_routed", labels));
    this.blind = c.index(statName("requests_routed_blind", labels));
    this.tokensIn = c.index(statName("tokens_in", labels));
    this.tokensOut = c.index(statName("tokens_out", labels));
  }
}

export class TrafficStats {
  readonly counters: DeferredCounters = new DeferredCounters();
  private admitted: StaticArray<i32> = new StaticArray<i32>(PRIORITY_COUNT);
  private refusedSaturated: StaticArray<i32> = new StaticArray<i32>(PRIORITY_COUNT);
  private retriesAdmitted: StaticArray<i32> = new StaticArray<i32>(PRIORITY_COUNT);
  private heldCounts: StaticArray<i32> = new StaticArray<i32>(PRIORITY_COUNT);
  private abandoned: StaticArray<i32> = new StaticArray<i32>(PRIORITY_COUNT);
  private downgraded: i32;
  private endpointFailures: i32;
  private spoofedHeaders: i32;
  /** Refusal counters by status and code, so a refusal builds no name once its reason was seen. */
  private byReason: Map<string, i32> = new Map();
  /** Per served model; ModelRoute.statIndex points here. */
  private models: ModelCounters[] = [];
  private modelsByName: Map<string, i32> = new Map();

  constructor() {
    const c = this.counters;
    for (let p = 0; p < PRIORITY_COUNT; p++) {
      const labels = ["class", priorityName(<Priority>p)];
      unchecked(this.admitted[p] = c.index(statName("class_admitted", labels)));
      unchecked(this.refusedSaturated[p] = c.index(statName("class_refused", labels)));
      unchecked(this.retriesAdmitted[p] = c.index(statName("class_retry_admitted", labels)));
      unchecked(this.heldCounts[p] = c.index(statName("class_held", labels)));
      unchecked(this.abandoned[p] = c.index(statName("class_held_abandoned", labels)));
    }
    this.downgraded = c.index(statName("critical_downgraded"));
    this.endpointFailures = c.index(statName("endpoint_failures"));
    this.spoofedHeaders = c.index(statName("client_control_headers_removed"));
  }

  /**
   * A request for `model` (the model served, after any canary split) was
   * admitted at class `p` and sent to `pool`: to `primary` first, or, when
   * null, to whichever host Envoy's balancer picks (routing blind).
   */
  admit(p: i32, pool: Pool, model: ModelRoute, primary: Endpoint | null): void {
    const c = this.counters;
    c.add(unchecked(this.admitted[p]), 1);
    const m = this.modelCounters(pool, model);
    c.add(m.routed, 1);
    if (primary == null) {
      c.add(m.blind, 1);
      return;
    }
    if (primary.statIndex < 0) primary.statIndex = c.index(statName("pod_picks", ["pool", pool.name, "pod", primary.address]));
    c.add(primary.statIndex, 1);
  }

  /** The answer to a request for `model` in `pool` reported these token counts. */
  tokens(pool: Pool, model: ModelRoute, usage: Usage): void {
    const m = this.modelCounters(pool, model);
    this.counters.add(m.tokensIn, usage.promptTokens);
    this.counters.add(m.tokensOut, usage.completionTokens);
  }

  /** Refused because the pool is saturated for class `p`. */
  refuseSaturated(p: i32): void {
    this.counters.add(unchecked(this.refusedSaturated[p]), 1);
  }

  /** Held in the gateway for want of room (it is admitted or refused later). */
  held(p: i32): void {
    this.counters.add(unchecked(this.heldCounts[p]), 1);
  }

  /** Its client left while it was held. */
  abandon(p: i32): void {
    this.counters.add(unchecked(this.abandoned[p]), 1);
  }

  /** A retry of a refused request got in on the next class's limit. */
  retryAdmitted(p: i32): void {
    this.counters.add(unchecked(this.retriesAdmitted[p]), 1);
  }

  /** A request asked for Critical without being allowed to. */
  downgrade(): void {
    this.counters.add(this.downgraded, 1);
  }

  /** Failures recorded against pods (a 5xx, or the request had to leave its first pod). */
  failures(n: i32): void {
    this.counters.add(this.endpointFailures, <u64>n);
  }

  /** A client-sent x-gateway-* header was removed. */
  spoofedHeader(): void {
    this.counters.add(this.spoofedHeaders, 1);
  }

  /** Every answer the filter gave itself instead of routing, by status and error code. */
  refuse(code: string, status: i32): void {
    // Only the 400s for unusable bodies come without a code.
    const reason = code.length > 0 ? code : "invalid_request";
    const key = status.toString() + reason;
    if (!this.byReason.has(key)) {
      this.byReason.set(key, this.counters.index(statName("requests_refused", ["status", status.toString(), "reason", reason])));
    }
    this.counters.add(this.byReason.get(key), 1);
  }

  /** A canary split sent a request for `requested` as `split.target`. */
  split(requested: ModelRoute, split: Split): void {
    if (split.statIndex < 0) {
      split.statIndex = this.counters.index(statName("canary_served", ["model", requested.name, "target", split.target!.name]));
    }
    this.counters.add(split.statIndex, 1);
  }

  flush(): void {
    this.counters.flush();
  }

  private modelCounters(pool: Pool, model: ModelRoute): ModelCounters {
    if (model.statIndex < 0) {
      // A new snapshot decodes new ModelRoute objects: find the counters by name again.
      const key = pool.name + ";" + model.name;
      if (!this.modelsByName.has(key)) {
        this.modelsByName.set(key, this.models.length);
        this.models.push(new ModelCounters(this.counters, pool.name, model.name));
      }
      model.statIndex = this.modelsByName.get(key);
    }
    return unchecked(this.models[model.statIndex]);
  }
}
