// A Prometheus histogram in seconds made of Envoy counters: one cumulative
// `<metric>_bucket;...;le=<bound>` per bound, `le=+Inf`, and `<metric>_count`,
// all counted in Wasm memory (deferred-counters.ts), so recording a value
// costs no host call and every value is recorded.
//
// Why not an Envoy histogram: Envoy records integers and prints a Wasm
// histogram's buckets in whatever unit was recorded, so a histogram fed
// microseconds cannot be read as seconds, and each record is a host call.
// What this gives up is `_sum` (a counter cannot hold fractions of a
// second): quantiles and rates work, a mean does not.
import { DeferredCounters } from "./deferred-counters";
import { statName } from "./stat-names";

/** `micros` as a decimal number of seconds, without trailing zeros: 2500 -> "0.0025". */
export function secondsText(micros: u64): string {
  const whole = (micros / 1_000_000).toString();
  const frac = micros % 1_000_000;
  if (frac == 0) return whole;
  let digits = (frac + 1_000_000).toString().substring(1);
  let end = digits.length;
  while (digits.charCodeAt(end - 1) == 0x30) end--;
  return whole + "." + digits.substring(0, end);
}

export class SecondsHistogram {
  private boundsUs: u64[];
  /** Counter indices: one per bound, then +Inf. */
  private buckets: i32[] = [];
  private count: i32;

  /** `boundsUs`: the buckets' upper bounds in microseconds, ascending. */
  constructor(counters: DeferredCounters, metric: string, tags: string[], boundsUs: u64[]) {
    this.boundsUs = boundsUs;
    for (let i = 0; i <= boundsUs.length; i++) {
      const le = i < boundsUs.length ? secondsText(unchecked(boundsUs[i])) : "+Inf";
      this.buckets.push(counters.index(statName(metric + "_bucket", tags.concat(["le", le]))));
    }
    this.count = counters.index(statName(metric + "_count", tags));
  }

  record(counters: DeferredCounters, micros: u64): void {
    const bounds = this.boundsUs;
    // Buckets are cumulative: the value counts in every bucket from the first bound it fits under.
    let i = bounds.length;
    while (i > 0 && micros <= unchecked(bounds[i - 1])) i--;
    for (; i <= bounds.length; i++) counters.add(unchecked(this.buckets[i]), 1);
    counters.add(this.count, 1);
  }
}
