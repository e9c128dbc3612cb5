// Requests in flight through this gateway, per endpoint, counted by every
// worker alike: +1 when a request is routed to its primary endpoint, -1 when
// its stream ends (success or failure). The filter keeps the table in one
// shared-data key written with compare-and-swap (gateway/shared-inflight.ts);
// the native build is handed the same bytes. This file is the pure part.
//
// Endpoints are keyed by the hash of their address, so a count survives a
// snapshot that reorders, adds or removes endpoints, and a stream that ends
// after its snapshot was replaced still releases the right count. Only
// non-zero counts are kept, sorted by hash, so the table is as small as the
// set of busy endpoints and lookups are binary searches.
//
// Beside each count, the streamed requests among them still waiting for
// their first token and those requests' uncached prompt tokens: the prefill
// work this gateway knows a pod has ahead. A stream's first bytes take it
// off; a scrape cannot show that work until the prefill ends.
//
// Encoding: u32 entry count, then per entry u64 address hash, i32 count,
// i32 prefilling requests, i32 their prompt tokens.
//
// The table also logs which endpoints' figures changed, so a pool's
// shortlist (core/scheduling/shortlist.ts) updates only those instead of
// re-reading every endpoint on every decision.

const ENTRY_BYTES: i32 = 20;
/** Beyond this many logged changes the log restarts and readers resynchronise in full (bounded memory). */
const MAX_LOGGED: i32 = 4096;

export class InflightTable {
  private hashes: u64[] = [];
  private counts: i32[] = [];
  private prefilling: i32[] = [];
  private prefillTokens: i32[] = [];
  /** Address hashes whose figures changed, in order; a reader keeps its position (see `epoch`). */
  readonly changes: u64[] = [];
  /** Bumped when the change log restarts: a reader holding an older epoch must resynchronise in full. */
  epoch: u32 = 0;
  // The previous contents while decode() compares them with the new (swapped, so neither allocates once grown).
  private oldHashes: u64[] = [];
  private oldCounts: i32[] = [];
  private oldPrefilling: i32[] = [];
  private oldPrefillTokens: i32[] = [];

  get size(): i32 {
    return this.hashes.length;
  }

  clear(): void {
    for (let i = 0; i < this.hashes.length; i++) this.logChange(unchecked(this.hashes[i]));
    this.hashes.length = 0;
    this.counts.length = 0;
    this.prefilling.length = 0;
    this.prefillTokens.length = 0;
  }

  /** The count for an endpoint (0 if it has none in flight). */
  get(hash: u64): i32 {
    const i = this.at(hash);
    return i >= 0 ? unchecked(this.counts[i]) : 0;
  }

  /** Of an endpoint's count, the streams not yet past their first token. */
  prefillingOf(hash: u64): i32 {
    const i = this.at(hash);
    return i >= 0 ? unchecked(this.prefilling[i]) : 0;
  }

  /** Those streams' uncached prompt tokens. */
  prefillTokensOf(hash: u64): i32 {
    const i = this.at(hash);
    return i >= 0 ? unchecked(this.prefillTokens[i]) : 0;
  }

  /**
   * Adds `delta` to an endpoint's count, never below 0 (a release must not
   * outnumber its routes), and `streams` prefilling streams of `tokens`
   * prompt tokens (negative: they got their first token, or ended). The
   * prefill figures stay within the count.
   */
  add(hash: u64, delta: i32, streams: i32 = 0, tokens: i32 = 0): void {
    const found = this.find(hash);
    let i = found;
    if (found < 0 || unchecked(this.hashes[found]) != hash) {
      if (delta <= 0) return;
      i = found + 1;
      insertAt(this.hashes, i, hash);
      insertAt(this.counts, i, 0);
      insertAt(this.prefilling, i, 0);
      insertAt(this.prefillTokens, i, 0);
    }
    this.logChange(hash);
    const n = unchecked(this.counts[i]) + delta;
    if (n <= 0) {
      removeAt(this.hashes, i);
      removeAt(this.counts, i);
      removeAt(this.prefilling, i);
      removeAt(this.prefillTokens, i);
      return;
    }
    unchecked(this.counts[i] = n);
    const p = min(max(unchecked(this.prefilling[i]) + streams, 0), n);
    unchecked(this.prefilling[i] = p);
    unchecked(this.prefillTokens[i] = p == 0 ? 0 : max(unchecked(this.prefillTokens[i]) + tokens, 0));
  }

  /**
   * Replaces the contents with an encoded table, logging the endpoints whose
   * figures differ from before; false (and empty) if the bytes are not one.
   */
  decode(ptr: usize, len: i32): bool {
    if (len == 0) {
      this.clear();
      return true;
    }
    const n = len < 4 ? -1 : <i32>load<u32>(ptr);
    if (n < 0 || <i64>len != 4 + <i64>n * ENTRY_BYTES) {
      this.clear();
      return false;
    }
    this.swapOut();
    let prev: u64 = 0;
    for (let i = 0; i < n; i++) {
      const at = ptr + 4 + <usize>(i * ENTRY_BYTES);
      const hash = load<u64>(at);
      const count = load<i32>(at + 8);
      const streams = load<i32>(at + 12);
      const tokens = load<i32>(at + 16);
      // Sorted, unique, positive, prefill within the count: anything else was not written by this code.
      if ((i > 0 && hash <= prev) || count <= 0 || streams < 0 || streams > count || tokens < 0 || (streams == 0 && tokens != 0)) {
        this.hashes.length = 0;
        this.counts.length = 0;
        this.prefilling.length = 0;
        this.prefillTokens.length = 0;
        this.logDifferences();
        return false;
      }
      this.hashes.push(hash);
      this.counts.push(count);
      this.prefilling.push(streams);
      this.prefillTokens.push(tokens);
      prev = hash;
    }
    this.logDifferences();
    return true;
  }

  /** The current contents become the old ones, and the current arrays empty (reusing the old arrays' storage). */
  private swapOut(): void {
    const h = this.oldHashes;
    this.oldHashes = this.hashes;
    this.hashes = h;
    h.length = 0;
    const c = this.oldCounts;
    this.oldCounts = this.counts;
    this.counts = c;
    c.length = 0;
    const p = this.oldPrefilling;
    this.oldPrefilling = this.prefilling;
    this.prefilling = p;
    p.length = 0;
    const t = this.oldPrefillTokens;
    this.oldPrefillTokens = this.prefillTokens;
    this.prefillTokens = t;
    t.length = 0;
  }

  /** Logs every endpoint whose figures differ between the old and current contents (both sorted by hash). */
  private logDifferences(): void {
    const a = this.oldHashes;
    const b = this.hashes;
    let i = 0;
    let j = 0;
    while (i < a.length || j < b.length) {
      const ha = i < a.length ? unchecked(a[i]) : u64.MAX_VALUE;
      const hb = j < b.length ? unchecked(b[j]) : u64.MAX_VALUE;
      if (i < a.length && j < b.length && ha == hb) {
        if (unchecked(this.oldCounts[i]) != unchecked(this.counts[j]) || unchecked(this.oldPrefilling[i]) != unchecked(this.prefilling[j]) ||
          unchecked(this.oldPrefillTokens[i]) != unchecked(this.prefillTokens[j])) {
          this.logChange(ha);
        }
        i++;
        j++;
      } else if (j >= b.length || (i < a.length && ha < hb)) {
        this.logChange(ha);
        i++;
      } else {
        this.logChange(hb);
        j++;
      }
    }
  }

  private logChange(hash: u64): void {
    if (this.changes.length >= MAX_LOGGED) {
      this.changes.length = 0;
      this.epoch++;
    }
    this.changes.push(hash);
  }

  encodedLength(): i32 {
    return 4 + this.hashes.length * ENTRY_BYTES;
  }

  /** Writes the encoding at `ptr` (encodedLength() bytes). */
  encodeInto(ptr: usize): void {
    const n = this.hashes.length;
    store<u32>(ptr, <u32>n);
    for (let i = 0; i < n; i++) {
      const at = ptr + 4 + <usize>(i * ENTRY_BYTES);
      store<u64>(at, unchecked(this.hashes[i]));
      store<i32>(at + 8, unchecked(this.counts[i]));
      store<i32>(at + 12, unchecked(this.prefilling[i]));
      store<i32>(at + 16, unchecked(this.prefillTokens[i]));
    }
  }

  /** Index of `hash`, or -1. */
  private at(hash: u64): i32 {
    const i = this.find(hash);
    return i >= 0 && unchecked(this.hashes[i]) == hash ? i : -1;
  }

  /** Index of the last hash <= `hash`, or -1. */
  private find(hash: u64): i32 {
    let lo = 0;
    let hi = this.hashes.length - 1;
    let found = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >>> 1;
      if (unchecked(this.hashes[mid]) <= hash) {
        found = mid;
        lo = mid + 1;
      } else {
        hi = mid - 1;
      }
    }
    return found;
  }
}

function insertAt<T>(a: T[], at: i32, v: T): void {
  a.push(v);
  for (let i = a.length - 1; i > at; i--) unchecked(a[i] = a[i - 1]);
  unchecked(a[at] = v);
}

/** In place: splice() would allocate the array of what it removed, on every request's release. */
function removeAt<T>(a: T[], at: i32): void {
  const last = a.length - 1;
  for (let i = at; i < last; i++) unchecked(a[i] = a[i + 1]);
  a.length = last;
}
