// The filter's per-request counters: requests routed and tokens per pool and
// model, picks per pod, refusals by status and reason, admissions and
// refusals per class, canary targets, pod failures, removed client headers;
// and how long one routing decision in 16 took and, per pool and model, each
// stream's time to its first answer bytes (seconds-histogram.ts).
// All are counted in Wasm memory and handed to Envoy on the refresh tick
// (deferred-counters.ts), so a request pays no host call for them. Names and
// labels follow stat-names.ts; each counter's name is built once, the first
// time its labels are seen, and remembered on the snapshot object it counts
// (pod, model, split) or here (reason).
import { Priority, PRIORITY_COUNT, priorityName } from "../core/fleet/priority";
import { Endpoint, ModelRoute, Pool, Split } from "../core/fleet/snapshot";
import { Usage } from "../core/openai/usage";
import { DeferredCounters } from "./deferred-counters";
import { SecondsHistogram } from "./seconds-histogram";
import { statName } from "./stat-names";

/** Decisions take tens to hundreds of microseconds: fine buckets there, for usable p50 and p99. */
const DECISION_BOUNDS_US: u64[] = [5, 10, 20, 30, 50, 75, 100, 150, 200, 300, 500, 750, 1_000, 2_000, 5_000, 10_000, 50_000];
/**
 * Decisions timed: a timed one costs two clock reads, and one in 16 gives
 * the quantiles hundreds of samples a second on a busy worker.
 */
const DECISION_SAMPLE: u32 = 16;
/** A first token comes after the prompt's prefill and any queueing: 10 ms to a minute. */
const FIRST_TOKEN_BOUNDS_US: u64[] = [10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000, 5_000_000, 10_000_000, 30_000_000, 60_000_000];

/** The counters of one served model, all labelled with its pool and name. */
class ModelCounters {
  routed: i32;
  blind: i32;
  tokensIn: i32;
  tokensOut: i32;
  /** Streams that answered 200 and then sent an error event. */
  streamErrors: i32;
  /** Made for the model's first stream: 13 counters a model that is never streamed does not need. */
  firstToken: SecondsHistogram | null = null;
  private labels: string[];

  constructor(c: DeferredCounters, pool: string, model: string) {
    const labels = ["pool", pool, "model", model];
    this.labels = labels;
    this.routed = c.index(statName("requests_routed_total", labels));
    this.blind = c.index(statName("requests_routed_blind_total", labels));
    this.tokensIn = c.index(statName("tokens_in_total", labels));
    this.tokensOut = c.index(statName("tokens_out_total", labels));
    this.streamErrors = c.index(statName("stream_errors_total", labels));
  }

  firstTokens(c: DeferredCounters): SecondsHistogram {
    if (this.firstToken == null) this.firstToken = new SecondsHistogram(c, "time_to_first_token_seconds", this.labels, FIRST_TOKEN_BOUNDS_US);
    return this.firstToken!;
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
  private endpointSaturated: i32;
  private spoofedHeaders: i32;
  private decisionsMade: u32 = 0;
  private decisions: SecondsHistogram = new SecondsHistogram(this.counters, "decision_duration_seconds", [], DECISION_BOUNDS_US);
  /** Refusal counters by status and code, so a refusal builds no name once its reason was seen. */
  private byReason: Map<string, i32> = new Map();
  /** Per served model; ModelRoute.statIndex points here. */
  private models: ModelCounters[] = [];
  private modelsByName: Map<string, i32> = new Map();

  constructor() {
    const c = this.counters;
    for (let p = 0; p < PRIORITY_COUNT; p++) {
      const labels = ["class", priorityName(<Priority>p)];
      unchecked(this.admitted[p] = c.index(statName("class_admitted_total", labels)));
      unchecked(this.refusedSaturated[p] = c.index(statName("class_refused_total", labels)));
      unchecked(this.retriesAdmitted[p] = c.index(statName("class_retry_admitted_total", labels)));
      unchecked(this.heldCounts[p] = c.index(statName("class_held_total", labels)));
      unchecked(this.abandoned[p] = c.index(statName("class_held_abandoned_total", labels)));
    }
    this.downgraded = c.index(statName("critical_downgraded_total"));
    this.endpointFailures = c.index(statName("endpoint_failures_total"));
    this.endpointSaturated = c.index(statName("endpoint_saturated_total"));
    this.spoofedHeaders = c.index(statName("client_control_headers_removed_total"));
  }

  /** Whether to time the decision about to be made: one in DECISION_SAMPLE, from the first (two clock reads each). */
  timesDecision(): bool {
    return this.decisionsMade++ % DECISION_SAMPLE == 0;
  }

  /** A timed routing decision took `micros`. */
  decisionTook(micros: u64): void {
    this.decisions.record(this.counters, micros);
  }

  /** A stream for `model` in `pool` sent its first bytes `micros` after its request was complete. */
  firstToken(pool: Pool, model: ModelRoute, micros: u64): void {
    this.modelCounters(pool, model).firstTokens(this.counters).record(this.counters, micros);
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
    if (primary.statIndex < 0) primary.statIndex = c.index(statName("pod_picks_total", ["pool", pool.name, "model_server", primary.address]));
    c.add(primary.statIndex, 1);
  }

  /** The answer to a request for `model` in `pool` reported these token counts. */
  tokens(pool: Pool, model: ModelRoute, usage: Usage): void {
    const m = this.modelCounters(pool, model);
    this.counters.add(m.tokensIn, usage.promptTokens);
    this.counters.add(m.tokensOut, usage.completionTokens);
  }

  /** A 200 stream for `model` in `pool` ended with an error event. */
  streamError(pool: Pool, model: ModelRoute): void {
    this.counters.add(this.modelCounters(pool, model).streamErrors, 1);
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

  /** A pod answered 429 or 503 itself and was backed off. */
  saturated(): void {
    this.counters.add(this.endpointSaturated, 1);
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
      this.byReason.set(key, this.counters.index(statName("requests_refused_total", ["status", status.toString(), "reason", reason])));
    }
    this.counters.add(this.byReason.get(key), 1);
  }

  /** A canary split sent a request for `requested` as `split.target`. */
  split(requested: ModelRoute, split: Split): void {
    if (split.statIndex < 0) {
      split.statIndex = this.counters.index(statName("canary_served_total", ["model", requested.name, "target", split.target!.name]));
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
