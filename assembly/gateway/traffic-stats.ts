// Per-decision counters: picks per pod, refusals per reason, admissions and
// refusals per class, canary targets. They are counted in Wasm memory and
// handed to Envoy on the refresh tick, so a request pays no host call for
// them however many there are. Envoy shows them as
// wasmcustom.llm_gateway.<...>; names are sanitised to [A-Za-z0-9_-] per
// segment so dots in addresses and model names do not split the stat tree.
import { defineMetric, incrementMetric, MetricType } from "../abi/hostcalls";
import { Priority, PRIORITY_COUNT, priorityName } from "../core/priority";
import { Endpoint, ModelRoute, Pool, Split } from "../core/snapshot";

export class DeferredCounters {
  private ids: u32[] = [];
  private pending: u64[] = [];
  private dirty: i32[] = [];
  private byName: Map<string, i32> = new Map();

  /** The counter `name`, defined in Envoy the first time it is asked for. */
  index(name: string): i32 {
    if (this.byName.has(name)) return this.byName.get(name);
    const i = this.ids.length;
    this.ids.push(defineMetric(MetricType.Counter, name));
    this.pending.push(0);
    this.byName.set(name, i);
    return i;
  }

  add(i: i32, n: u64): void {
    if (unchecked(this.pending[i]) == 0) this.dirty.push(i);
    unchecked(this.pending[i] += n);
  }

  /** Hands the counts to Envoy: one host call per counter that moved. */
  flush(): void {
    const dirty = this.dirty;
    for (let k = 0; k < dirty.length; k++) {
      const i = unchecked(dirty[k]);
      incrementMetric(unchecked(this.ids[i]), <i64>unchecked(this.pending[i]));
      unchecked(this.pending[i] = 0);
    }
    dirty.length = 0;
  }
}

export class TrafficStats {
  readonly counters: DeferredCounters = new DeferredCounters();
  private admitted: StaticArray<i32> = new StaticArray<i32>(PRIORITY_COUNT);
  private refusedSaturated: StaticArray<i32> = new StaticArray<i32>(PRIORITY_COUNT);
  private retriesAdmitted: StaticArray<i32> = new StaticArray<i32>(PRIORITY_COUNT);
  private downgraded: i32;
  /** Refusal counters by error code, so a refusal builds no name once its reason was seen. */
  private byReason: Map<string, i32> = new Map();
  readonly routed: i32;

  constructor() {
    const c = this.counters;
    for (let p = 0; p < PRIORITY_COUNT; p++) {
      const prefix = "llm_gateway.class." + priorityName(<Priority>p) + ".";
      unchecked(this.admitted[p] = c.index(prefix + "admitted"));
      unchecked(this.refusedSaturated[p] = c.index(prefix + "refused"));
      unchecked(this.retriesAdmitted[p] = c.index(prefix + "retry_admitted"));
    }
    this.downgraded = c.index("llm_gateway.class.critical.downgraded");
    this.routed = c.index("llm_gateway.requests_routed");
  }

  /** A request was admitted at class `p` and sent to `primary` (null when Envoy picks: blind routing, counted apart). */
  admit(p: i32, pool: Pool, primary: Endpoint | null): void {
    const c = this.counters;
    c.add(unchecked(this.admitted[p]), 1);
    if (primary == null) return;
    c.add(this.routed, 1);
    if (primary.statIndex < 0) primary.statIndex = c.index("llm_gateway.pool." + segment(pool.name) + ".pod." + segment(primary.address) + ".picks");
    c.add(primary.statIndex, 1);
  }

  /** Refused because the pool is saturated for class `p`. */
  refuseSaturated(p: i32): void {
    this.counters.add(unchecked(this.refusedSaturated[p]), 1);
  }

  /** A retry of a refused request got in on the next class's limit. */
  retryAdmitted(p: i32): void {
    this.counters.add(unchecked(this.retriesAdmitted[p]), 1);
  }

  downgrade(): void {
    this.counters.add(this.downgraded, 1);
  }

  /** Every refusal, by the error's code (or the status's kind). */
  refuse(code: string, status: i32): void {
    const key = code.length > 0 ? code : status.toString();
    if (!this.byReason.has(key)) {
      const reason = code.length > 0 ? code : status == 400 ? "invalid_request" : "status_" + key;
      this.byReason.set(key, this.counters.index("llm_gateway.refused." + segment(reason)));
    }
    this.counters.add(this.byReason.get(key), 1);
  }

  /** A canary split sent a request for `requested` as `split.target`. */
  split(requested: ModelRoute, split: Split): void {
    if (split.statIndex < 0) {
      split.statIndex = this.counters.index("llm_gateway.model." + segment(requested.name) + ".served_as." + segment(split.target!.name));
    }
    this.counters.add(split.statIndex, 1);
  }

  flush(): void {
    this.counters.flush();
  }
}

/** A stat name segment: anything but letters, digits, '-' and '_' becomes '_'. */
function segment(s: string): string {
  let out = "";
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    const ok = (c >= 0x30 && c <= 0x39) || ((c | 0x20) >= 0x61 && (c | 0x20) <= 0x7a) || c == 0x2d || c == 0x5f;
    out += ok ? String.fromCharCode(c) : "_";
  }
  return out;
}
