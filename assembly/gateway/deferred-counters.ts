// Envoy counters counted in Wasm memory and handed to Envoy on the refresh
// tick, so a request pays no host call for them however many it moves.
import { defineMetric, incrementMetric, MetricType } from "../abi/hostcalls";

export class DeferredCounters {
  private ids: u32[] = [];
  private pending: u64[] = [];
  private dirty: i32[] = [];
  private byName: Map<string, i32> = new Map();

  /** The counter `name` (stat-names.ts), defined in Envoy the first time it is asked for. */
  index(name: string): i32 {
    if (this.byName.has(name)) return this.byName.get(name);
    const i = this.ids.length;
    this.ids.push(defineMetric(MetricType.Counter, name));
    this.pending.push(0);
    this.byName.set(name, i);
    return i;
  }

  add(i: i32, n: u64): void {
    if (n == 0) return;
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
