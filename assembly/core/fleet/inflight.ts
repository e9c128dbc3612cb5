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

const ENTRY_BYTES: i32 = 20;

export class InflightTable {
  private hashes: u64[] = [];
  private counts: i32[] = [];
  private prefilling: i32[] = [];
  private prefillTokens: i32[] = [];

  get size(): i32 {
    return this.hashes.length;
  }

  clear(): void {
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

  /** Replaces the contents with an encoded table; false (and empty) if the bytes are not one. */
  decode(ptr: usize, len: i32): bool {
    this.clear();
    if (len == 0) return true;
    if (len < 4) return false;
    const n = <i32>load<u32>(ptr);
    if (n < 0 || <i64>len != 4 + <i64>n * ENTRY_BYTES) return false;
    let prev: u64 = 0;
    for (let i = 0; i < n; i++) {
      const at = ptr + 4 + <usize>(i * ENTRY_BYTES);
      const hash = load<u64>(at);
      const count = load<i32>(at + 8);
      const streams = load<i32>(at + 12);
      const tokens = load<i32>(at + 16);
      // Sorted, unique, positive, prefill within the count: anything else was not written by this code.
      if ((i > 0 && hash <= prev) || count <= 0 || streams < 0 || streams > count || tokens < 0 || (streams == 0 && tokens != 0)) {
        this.clear();
        return false;
      }
      this.hashes.push(hash);
      this.counts.push(count);
      this.prefilling.push(streams);
      this.prefillTokens.push(tokens);
      prev = hash;
    }
    return true;
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
