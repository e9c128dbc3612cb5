// Relative capacity of the candidates: each endpoint's service rate over the
// fastest candidate's, so 1 is the fastest and 0.35 an older GPU. Rates come
// from the snapshot (configured, or learned by the aggregator from the
// engine's time per output token). An endpoint whose rate is unknown is taken
// to be as fast as the median known one: neither favoured nor shunned.
import { Endpoint } from "../fleet/snapshot";
import { sortPrefix } from "./sort";

/**
 * Learned rates of identical GPUs differ by their current batch (a pod with
 * more running sequences decodes each one slower); within this ratio of the
 * fastest, pods count as equally fast, so that noise does not tilt the
 * scores on a uniform fleet (measured: learned rates of one GPU type under
 * load spread about ±10%).
 */
const SAME_SPEED: f64 = 0.85;

export function relativeCapacities(candidates: Endpoint[], out: StaticArray<f64>, sorted: StaticArray<f64>): void {
  const n = candidates.length;
  let known = 0;
  let fastest = 0.0;
  for (let i = 0; i < n; i++) {
    const c = unchecked(candidates[i]).capacity;
    if (c > 0) {
      unchecked(sorted[known++] = c);
      if (c > fastest) fastest = c;
    }
  }
  if (known == 0) {
    for (let i = 0; i < n; i++) unchecked(out[i] = 1.0);
    return;
  }
  const median = known < n ? medianOf(sorted, known) : 0;
  for (let i = 0; i < n; i++) {
    const c = unchecked(candidates[i]).capacity;
    const relative = (c > 0 ? c : median) / fastest;
    unchecked(out[i] = relative >= SAME_SPEED ? 1.0 : relative);
  }
}

/** Median of a[0..n), sorting it (n is a pool's size, and usually all rates are known). */
function medianOf(a: StaticArray<f64>, n: i32): f64 {
  sortPrefix(a, n);
  return unchecked(a[n >> 1]);
}
