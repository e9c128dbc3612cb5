// How far the filter trusts its view of the fleet. The link stamps the time it
// last heard from the aggregator (a snapshot or a heartbeat) on Envoy's own
// clock, so the age is immune to clock skew between the aggregator and Envoy.
// Past `maxAgeMs` the per-pod freshness flags in the last snapshot can no
// longer be believed (a pod may have died after the aggregator did).

export const enum StaleViewPolicy {
  /** Route by model only and let Envoy's least-request pick among the pool's known hosts. */
  FailOpen = 0,
  /** Answer 503 with Retry-After until the aggregator is heard again. */
  Reject = 1,
}

export class ViewPolicy {
  /** Three missed heartbeats at the aggregator's default 1 s interval. */
  maxAgeMs: u64 = 3_000;
  stalePolicy: StaleViewPolicy = StaleViewPolicy.FailOpen;
  /** Seconds a client is told to wait under the Reject policy. */
  retryAfterS: u32 = 1;
}

/** True when the last word from the aggregator is older than the bound (or never came). */
export function viewIsStale(nowMs: u64, heardMs: u64, maxAgeMs: u64): bool {
  if (heardMs == 0) return true;
  // A clock that stepped backwards makes the view look new; that is harmless.
  return nowMs > heardMs && nowMs - heardMs > maxAgeMs;
}

export const enum ViewHealth { Ok = 0, Degraded = 1, Unavailable = 2 }

/**
 * What the gateway's /health says: ok while it routes on a fresh view,
 * degraded while it routes blind on an old one (fail open), unavailable
 * (503) with no snapshot yet, or with an old one under the Reject policy.
 */
export function viewHealth(hasSnapshot: bool, stale: bool, policy: StaleViewPolicy): ViewHealth {
  if (!hasSnapshot || (stale && policy == StaleViewPolicy.Reject)) return ViewHealth.Unavailable;
  return stale ? ViewHealth.Degraded : ViewHealth.Ok;
}
