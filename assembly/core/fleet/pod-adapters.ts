// One pod's LoRA adapter placements by this gateway, most recent first: the
// LRU that stands for the adapters its engine probably still holds
// (adapter-slots.ts says why). Kept on the decoded endpoint (snapshot.ts), so
// scoring reads it without a lookup.

/** Distinct adapters remembered per pod: a larger max_lora is taken as this many. */
const TRACKED: i32 = 32;

/** One pod's adapter placements, most recent first. */
export class PodAdapters {
  private recent: StaticArray<u64> = new StaticArray<u64>(TRACKED);
  private count: i32 = 0;

  /** Whether `adapter` is among the last `slots` distinct adapters placed on the pod. */
  holds(adapter: u64, slots: i32): bool {
    const n = min(min(slots, TRACKED), this.count);
    for (let i = 0; i < n; i++) if (unchecked(this.recent[i]) == adapter) return true;
    return false;
  }

  /** `adapter` was placed on the pod: it becomes the most recent, and the least recent falls off a full list. */
  touch(adapter: u64): void {
    if (toFront(this.recent, this.count, adapter) && this.count < TRACKED) this.count++;
  }
}

/**
 * Moves `v` to the front of `list[0..n)`, or puts it there and shifts the
 * others back (the last one falling off a full list); true if it was not there.
 */
export function toFront(list: StaticArray<u64>, n: i32, v: u64): bool {
  let at = 0;
  while (at < n && unchecked(list[at]) != v) at++;
  const added = at == n;
  if (at == list.length) at--;
  for (let i = at; i > 0; i--) unchecked(list[i] = list[i - 1]);
  unchecked(list[0] = v);
  return added;
}
