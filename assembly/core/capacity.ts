// Relative capacity of the candidates: each endpoint's service rate over the
// fastest candidate's, so 1 is the fastest and 0.35 an older GPU. Rates come
// from the snapshot (configured, or learned by the aggregator from the
// engine's time per output token). An endpoint whose rate is unknown is taken
// to be as fast as the median known one: neither favoured nor shunned.
import { Endpoint } from "./snapshot";

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
    unchecked(out[i] = (c > 0 ? c : median) / fastest);
  }
}

/** Median of sorted[0..n) (insertion sort: n is a pool's size, and usually all rates are known). */
function medianOf(a: StaticArray<f64>, n: i32): f64 {
  for (let i = 1; i < n; i++) {
    const v = unchecked(a[i]);
    let j = i - 1;
    while (j >= 0 && unchecked(a[j]) > v) {
      unchecked(a[j + 1] = a[j]);
      j--;
    }
    unchecked(a[j + 1] = v);
  }
  return unchecked(a[n >> 1]);
}
