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
//
// Beside this gateway's own figures the table holds its peers': the other
// Envoy replicas' in flight, as the control plane last sent them
// (core/fleet/peer-load.ts). The readers (get and the others) add them in, so
// scoring, a snapshot's baseline and the shortlist see every replica's load;
// add(), decode() and the encoding touch this gateway's own figures only, so
// a release can never take off a peer's request.

const ENTRY_BYTES: i32 = 20;
/** Beyond this many logged changes the log restarts and readers resynchronise in full (bounded memory). */
const MAX_LOGGED: i32 = 4096;

/** Per endpoint (sorted by address hash): requests in flight, the streams among them before their first token, and those streams' prompt tokens. */
class Figures {
  hashes: u64[] = [];
  counts: i32[] = [];
  prefilling: i32[] = [];
  prefillTokens: i32[] = [];

  clear(): void {
    this.hashes.length = 0;
    this.counts.length = 0;
    this.prefilling.length = 0;
    this.prefillTokens.length = 0;
  }

  /** A new endpoint at index `at`, with nothing in flight yet. */
  insert(at: i32, hash: u64): void {
    insertAt(this.hashes, at, hash);
    insertAt(this.counts, at, 0);
    insertAt(this.prefilling, at, 0);
    insertAt(this.prefillTokens, at, 0);
  }

  /** Drops the endpoint at index `at` (in place: no array is allocated). */
  remove(at: i32): void {
    removeAt(this.hashes, at);
    removeAt(this.counts, at);
    removeAt(this.prefilling, at);
    removeAt(this.prefillTokens, at);
  }
}

export class InflightTable {
  /** This gateway's own figures. */
  private own: Figures = new Figures();
  /** Address hashes whose figures changed, in order; a reader keeps its position (see `epoch`). */
  readonly changes: u64[] = [];
  /** Bumped when the change log restarts: a reader holding an older epoch must resynchronise in full. */
  epoch: u32 = 0;
  /** The previous contents while a decode compares them with the new (swapped, so neither allocates once grown). */
  private old: Figures = new Figures();
  /** The peers' figures (sorted by hash, as the own), replaced whole by decodePeers(). */
  private peers: Figures = new Figures();

  /** Endpoints with requests of this gateway's own in flight. */
  get size(): i32 {
    return this.own.hashes.length;
  }

  /** The i-th own entry (sorted by hash), for encoders that walk the table. */
  hashAt(i: i32): u64 {
    return unchecked(this.own.hashes[i]);
  }

  countAt(i: i32): i32 {
    return unchecked(this.own.counts[i]);
  }

  prefillingAt(i: i32): i32 {
    return unchecked(this.own.prefilling[i]);
  }

  prefillTokensAt(i: i32): i32 {
    return unchecked(this.own.prefillTokens[i]);
  }

  clear(): void {
    for (let i = 0; i < this.own.hashes.length; i++) this.logChange(unchecked(this.own.hashes[i]));
    this.own.clear();
  }

  /** The count for an endpoint, this gateway's and its peers' (0 if it has none in flight). */
  get(hash: u64): i32 {
    const i = this.at(hash);
    const p = this.peerAt(hash);
    return (i >= 0 ? unchecked(this.own.counts[i]) : 0) + (p >= 0 ? unchecked(this.peers.counts[p]) : 0);
  }

  /** Of an endpoint's count, the streams not yet past their first token. */
  prefillingOf(hash: u64): i32 {
    const i = this.at(hash);
    const p = this.peerAt(hash);
    return (i >= 0 ? unchecked(this.own.prefilling[i]) : 0) + (p >= 0 ? unchecked(this.peers.prefilling[p]) : 0);
  }

  /** Those streams' uncached prompt tokens. */
  prefillTokensOf(hash: u64): i32 {
    const i = this.at(hash);
    const p = this.peerAt(hash);
    return (i >= 0 ? unchecked(this.own.prefillTokens[i]) : 0) + (p >= 0 ? unchecked(this.peers.prefillTokens[p]) : 0);
  }

  /** This gateway's own count for an endpoint, without its peers'. */
  ownOf(hash: u64): i32 {
    const i = this.at(hash);
    return i >= 0 ? unchecked(this.own.counts[i]) : 0;
  }

  /**
   * Replaces the peers' figures with an encoded table (the own encoding),
   * logging the endpoints whose peer figures changed; false (and no peers)
   * if the bytes are not one.
   */
  decodePeers(ptr: usize, len: i32): bool {
    // The old peers become the scratch arrays' contents, as decode() swaps the own.
    this.swapPeers();
    const ok = parseTable(ptr, len, this.peers);
    this.logDifferences(this.old, this.peers);
    return ok;
  }

  /**
   * Sets an endpoint's own figures outright (0 removes it): how a copy of
   * the peers' sum applies the control plane's changed entries.
   */
  set(hash: u64, count: i32, streams: i32, tokens: i32): void {
    const found = this.find(hash);
    const present = found >= 0 && unchecked(this.own.hashes[found]) == hash;
    if (count <= 0) {
      if (!present) return;
      this.logChange(hash);
      this.own.remove(found);
      return;
    }
    let i = found;
    if (!present) {
      i = found + 1;
      this.own.insert(i, hash);
    }
    this.logChange(hash);
    const p = min(max(streams, 0), count);
    unchecked(this.own.counts[i] = count);
    unchecked(this.own.prefilling[i] = p);
    unchecked(this.own.prefillTokens[i] = p == 0 ? 0 : max(tokens, 0));
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
    if (found < 0 || unchecked(this.own.hashes[found]) != hash) {
      if (delta <= 0) return;
      i = found + 1;
      this.own.insert(i, hash);
    }
    this.logChange(hash);
    const n = unchecked(this.own.counts[i]) + delta;
    if (n <= 0) {
      this.own.remove(i);
      return;
    }
    unchecked(this.own.counts[i] = n);
    const p = min(max(unchecked(this.own.prefilling[i]) + streams, 0), n);
    unchecked(this.own.prefilling[i] = p);
    unchecked(this.own.prefillTokens[i] = p == 0 ? 0 : max(unchecked(this.own.prefillTokens[i]) + tokens, 0));
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
    this.swapOut();
    const ok = parseTable(ptr, len, this.own);
    this.logDifferences(this.old, this.own);
    return ok;
  }

  /** The current contents become the old ones, and the current figures empty (reusing the old ones' storage). */
  private swapOut(): void {
    const emptied = this.old;
    this.old = this.own;
    this.own = emptied;
    emptied.clear();
  }

  /** The peers' contents become the old ones, and the peers' figures empty. */
  private swapPeers(): void {
    const emptied = this.old;
    this.old = this.peers;
    this.peers = emptied;
    emptied.clear();
  }

  /** Logs every endpoint whose figures differ between two contents (a* old, b* new, both sorted by hash). */
  private logDifferences(before: Figures, after: Figures): void {
    const a = before.hashes;
    const b = after.hashes;
    const aCounts = before.counts;
    const bCounts = after.counts;
    const aPrefilling = before.prefilling;
    const bPrefilling = after.prefilling;
    const aTokens = before.prefillTokens;
    const bTokens = after.prefillTokens;
    let i = 0;
    let j = 0;
    while (i < a.length || j < b.length) {
      const ha = i < a.length ? unchecked(a[i]) : u64.MAX_VALUE;
      const hb = j < b.length ? unchecked(b[j]) : u64.MAX_VALUE;
      if (i < a.length && j < b.length && ha == hb) {
        if (unchecked(aCounts[i]) != unchecked(bCounts[j]) || unchecked(aPrefilling[i]) != unchecked(bPrefilling[j]) ||
          unchecked(aTokens[i]) != unchecked(bTokens[j])) {
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
    return 4 + this.own.hashes.length * ENTRY_BYTES;
  }

  /** Writes the encoding at `ptr` (encodedLength() bytes). */
  encodeInto(ptr: usize): void {
    const n = this.own.hashes.length;
    store<u32>(ptr, <u32>n);
    for (let i = 0; i < n; i++) {
      const at = ptr + 4 + <usize>(i * ENTRY_BYTES);
      store<u64>(at, unchecked(this.own.hashes[i]));
      store<i32>(at + 8, unchecked(this.own.counts[i]));
      store<i32>(at + 12, unchecked(this.own.prefilling[i]));
      store<i32>(at + 16, unchecked(this.own.prefillTokens[i]));
    }
  }

  /** Index of `hash` among the peers', or -1. */
  private peerAt(hash: u64): i32 {
    const peers = this.peers.hashes;
    let lo = 0;
    let hi = peers.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >>> 1;
      const h = unchecked(peers[mid]);
      if (h == hash) return mid;
      if (h < hash) lo = mid + 1;
      else hi = mid - 1;
    }
    return -1;
  }

  /** Index of `hash`, or -1. */
  private at(hash: u64): i32 {
    const i = this.find(hash);
    return i >= 0 && unchecked(this.own.hashes[i]) == hash ? i : -1;
  }

  /** Index of the last hash <= `hash`, or -1. */
  private find(hash: u64): i32 {
    let lo = 0;
    let hi = this.own.hashes.length - 1;
    let found = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >>> 1;
      if (unchecked(this.own.hashes[mid]) <= hash) {
        found = mid;
        lo = mid + 1;
      } else {
        hi = mid - 1;
      }
    }
    return found;
  }
}

/**
 * Fills the (empty) arrays from an encoded table; false, and left empty, if
 * the bytes are not one (sorted, unique, positive, prefill within the count:
 * anything else was not written by this code). No bytes: an empty table.
 */
function parseTable(ptr: usize, len: i32, into: Figures): bool {
  const hashes = into.hashes;
  const counts = into.counts;
  const prefilling = into.prefilling;
  const tokens = into.prefillTokens;
  if (len == 0) return true;
  const n = len < 4 ? -1 : <i32>load<u32>(ptr);
  if (n < 0 || <i64>len != 4 + <i64>n * ENTRY_BYTES) return false;
  let prev: u64 = 0;
  for (let i = 0; i < n; i++) {
    const at = ptr + 4 + <usize>(i * ENTRY_BYTES);
    const hash = load<u64>(at);
    const count = load<i32>(at + 8);
    const streams = load<i32>(at + 12);
    const t = load<i32>(at + 16);
    if ((i > 0 && hash <= prev) || count <= 0 || streams < 0 || streams > count || t < 0 || (streams == 0 && t != 0)) {
      into.clear();
      return false;
    }
    hashes.push(hash);
    counts.push(count);
    prefilling.push(streams);
    tokens.push(t);
    prev = hash;
  }
  return true;
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
