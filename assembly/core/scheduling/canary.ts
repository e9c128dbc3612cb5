// Canary splits (InferenceModelRewrite semantics): requests for a model with
// splits are served as one of its targets, chosen by weight. Smooth weighted
// round-robin rather than a random draw: each worker hits the weights exactly
// (off by at most one request per target), so the split holds across workers
// however Envoy spreads connections over them, and small samples are not noisy.
import { ModelRoute, Snapshot, Split } from "../fleet/snapshot";

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

/**
 * Carries each split's round-robin position from the snapshot a worker routed
 * on to the one it installs: positions live in decoded snapshots, and a busy
 * pool brings a new one every few requests, each of which would otherwise
 * restart the sequence at its largest weight (a 90/10 split would never reach
 * its 10). Only a split whose targets and weights are unchanged carries over.
 */
export function carrySplits(from: Snapshot, to: Snapshot): void {
  const models = to.models;
  for (let i = 0; i < models.length; i++) {
    const m = unchecked(models[i]);
    if (m.splits.length == 0) continue;
    const old = from.find(m.name);
    if (old == null || !sameSplits(old, m)) continue;
    for (let k = 0; k < m.splits.length; k++) unchecked(m.splits[k]).current = unchecked(old.splits[k]).current;
  }
}

function sameSplits(a: ModelRoute, b: ModelRoute): bool {
  if (a.splits.length != b.splits.length) return false;
  for (let k = 0; k < a.splits.length; k++) {
    const x = unchecked(a.splits[k]);
    const y = unchecked(b.splits[k]);
    if (x.weight != y.weight || x.target!.name != y.target!.name) return false;
  }
  return true;
}
