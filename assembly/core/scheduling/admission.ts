// Admission: a request is refused with 429 only when every eligible pod of its
// pool is saturated for its class. A pod is saturated when the requests ahead
// of a new one (core/fleet/snapshot.ts, requestsAhead: what exceeds the sequences
// it can run in full, what it reported waiting or was sent since by the
// pool's typical prompt's share of a prefill step) reach the class's limit,
// or, below Critical, when its KV cache is nearly full and it
// already queues (new work would wait for memory; a high KV with an empty
// queue still starts the next request at once). So an idle pool never
// refuses a burst its batches can hold. Limits form a ladder, Sheddable <
// Standard < Critical, so whenever a Critical request is refused any
// Sheddable one would be too.
//
// Limits are not scaled by a pod's learned speed: identical GPUs read
// 0.4-1.0 of each other while one prefills long documents (prefill chunks
// stall its decode), which refused passing queues on a pool below capacity. The picker still sends work to the faster pods.
//
// A request that finds no room waits for what is held ahead of it and for
// the retries booked to come back before its turn, drained at the pool's
// measured completions (every worker's and replica's): one estimate
// (PoolLoad.waitMs) decides whether it is held within its class's budget
// and, if it is refused, its Retry-After: the time until its turn. A retry
// that comes back as told is held ahead of new work, or admitted up to a
// limit halfway to the next class's (core/fleet/refusals.ts).
import { Admission } from "../fleet/admission-limits";
import { Priority } from "../fleet/priority";
import { Endpoint } from "../fleet/snapshot";

/**
 * True when `e` has no room under queue limit `limit` for a request whose
 * prompt is `share` of a prefill step; `p` is the request's class.
 */
function saturated(a: Admission, e: Endpoint, limit: f64, share: f64, p: Priority): bool {
  // Room is batch slots and memory; a prefill in progress delays the first token but takes no room.
  const waiting = e.requestsAhead(share, false);
  if (waiting >= limit) return true;
  return p != Priority.Critical && waiting >= 1 && e.kvCacheUsage >= a.maxKvCache;
}

/**
 * True when some of the first `n` candidates has room for class `p` (for
 * its retry, with `retry`); `share` is the request's prompt's share of a
 * prefill step.
 */
export function hasRoom(a: Admission, candidates: Endpoint[], n: i32, share: f64, p: Priority, retry: bool = false): bool {
  const limit = retry ? a.retryLimit(p) : a.queueLimit(p);
  for (let i = 0; i < n; i++) {
    if (!saturated(a, unchecked(candidates[i]), limit, share, p)) return true;
  }
  return false;
}
