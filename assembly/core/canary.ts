// Canary splits (InferenceModelRewrite semantics): requests for a model with
// splits are served as one of its targets, chosen by weight. Smooth weighted
// round-robin rather than a random draw: each worker hits the weights exactly
// (off by at most one request per target), so the split holds across workers
// however Envoy spreads connections over them, and small samples are not noisy.
import { ModelRoute, Split } from "./snapshot";

/** The split a request for `m` is served by (its `target`); null when `m` has none. */
export function chooseSplit(m: ModelRoute): Split | null {
  const splits = m.splits;
  if (splits.length == 0) return null;
  let best = 0;
  let bestCurrent = i64.MIN_VALUE;
  for (let k = 0; k < splits.length; k++) {
    const s = unchecked(splits[k]);
    s.current += s.weight;
    if (s.current > bestCurrent) {
      best = k;
      bestCurrent = s.current;
    }
  }
  const chosen = unchecked(splits[best]);
  chosen.current -= m.splitTotal;
  return chosen;
}
