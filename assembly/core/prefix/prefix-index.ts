// Which endpoints probably hold a prompt prefix in their KV cache (or a LoRA
// adapter in a slot), learned from routing decisions (the engines' caches
// are not visible to a proxy, and scrapes show an adapter only ~50 ms late).
// Like the reference picker's index, an endpoint's cache is modelled as an
// LRU of its KV capacity in blocks: every request routed to it writes its
// uncached blocks, and a prefix counts as evicted once that many newer blocks
// were written after it was last used there. Unlike it, every worker applies
// the decisions of every other worker too (gateway/shared-prefix-log.ts, or
// the caller of the native build), so all workers agree on where a prefix is.
//
// Fixed memory: an open-addressing table of prefix keys, each with up to
// HOLDERS endpoints; a full probe window replaces its least recently used key.
// A key with HOLDERS live holders counts as held everywhere.
import { MAX_KEYS, PrefixKeys } from "./prefix-keys";
import { DEFAULT_KV_BLOCKS, PodCache } from "../fleet/pod-cache";
import { Pool, Snapshot } from "../fleet/snapshot";
import { PrefixMatch } from "./prefix-match";

const SLOTS: i32 = 4096; // power of two
const PROBE: i32 = 8;
export const HOLDERS: i32 = 8;
/** A 64-byte block of prompt is ~16 tokens at ~4 bytes per token. */
const TOKENS_PER_BLOCK: u64 = 16;

/** One routing decision as the index and the shared log see it. */
export class PrefixDecision {
  endpoint: u64 = 0;
  /** Blocks the request adds to the endpoint's cache (its prompt minus the matched part). */
  newBlocks: u32 = 0;
  keys: StaticArray<u64> = new StaticArray<u64>(MAX_KEYS);
  count: i32 = 0;
}

export class PrefixIndex {
  private keys: StaticArray<u64> = new StaticArray<u64>(SLOTS);
  private lastUse: StaticArray<u64> = new StaticArray<u64>(SLOTS);
  private holder: StaticArray<u64> = new StaticArray<u64>(SLOTS * HOLDERS);
  /** The holder's block clock when the prefix was last written or used there. */
  private stamp: StaticArray<u64> = new StaticArray<u64>(SLOTS * HOLDERS);
  /** Per endpoint (by address hash): its modelled cache. */
  private caches: Map<u64, PodCache> = new Map();
  private tick: u64 = 0;

  /** An endpoint's modelled cache, sized from its KV capacity in tokens (0 = unknown: the default). */
  attach(endpoint: u64, kvTokens: u32): PodCache {
    const blocks = <u64>kvTokens / TOKENS_PER_BLOCK;
    const cache = this.cache(endpoint);
    cache.capacity = blocks > 0 ? blocks : DEFAULT_KV_BLOCKS;
    return cache;
  }

  /**
   * For each endpoint of a pool (by slot, via `slots`: address hash -> slot)
   * the number of leading keys it holds, into `out`: an endpoint's match
   * ends at its first missing key, the scan at the first key nobody holds.
   */
  match(keys: PrefixKeys, pool: Pool, out: PrefixMatch): void {
    const slots = pool.slots;
    const endpoints = pool.endpoints;
    out.reset(endpoints.length);
    for (let k = 0; k < keys.count; k++) {
      const slot = this.find(unchecked(keys.keys[k]));
      if (slot < 0) return;
      let any = false;
      let live = 0;
      for (let h = 0; h < HOLDERS; h++) {
        const at = slot * HOLDERS + h;
        const e = unchecked(this.holder[at]);
        if (e == 0) continue;
        const s = slots.get(e);
        if (s < 0) continue;
        const cache = unchecked(endpoints[s]).prefixCache;
        if (cache == null || cache.clock - unchecked(this.stamp[at]) >= cache.capacity) continue;
        live++;
        if (out.of(s) == k) {
          out.advance(s);
          any = true;
        }
      }
      // As many live holders in the pool as the index keeps: the prefix is
      // likely cached on the others too (it is that hot), so no pod gets an
      // edge from it.
      if (live == HOLDERS) {
        out.advanceAll(k);
        any = true;
      }
      if (!any) return;
    }
  }

  /** The slots in `pool` of the live holders of `key` (at most HOLDERS), appended to `out`. */
  holdersIn(key: u64, pool: Pool, out: i32[]): void {
    const slot = this.find(key);
    if (slot < 0) return;
    for (let h = 0; h < HOLDERS; h++) {
      const at = slot * HOLDERS + h;
      const e = unchecked(this.holder[at]);
      if (e == 0) continue;
      const s = pool.slots.get(e);
      if (s >= 0 && this.alive(e, unchecked(this.stamp[at]))) out.push(s);
    }
  }

  /**
   * Drops the modelled caches of endpoints no longer in `snap` once they
   * outnumber the current ones: pods come and go for days, and a departed
   * pod's entries simply stop matching (it is in no pool, and has no cache).
   */
  retainOnly(snap: Snapshot): void {
    let current = 0;
    for (let p = 0; p < snap.pools.length; p++) current += snap.pools[p].endpoints.length;
    if (this.caches.size <= 2 * current + 16) return;
    const kept = new Map<u64, PodCache>();
    for (let p = 0; p < snap.pools.length; p++) {
      const endpoints = snap.pools[p].endpoints;
      for (let i = 0; i < endpoints.length; i++) {
        const h = unchecked(endpoints[i]).addressHash;
        if (this.caches.has(h)) kept.set(h, this.caches.get(h));
      }
    }
    this.caches = kept;
  }

  /** Whether `endpoint` holds `key` (a prefix key, or an adapter's placement key) and has not evicted it. */
  holds(key: u64, endpoint: u64): bool {
    const slot = this.find(key);
    if (slot < 0) return false;
    for (let h = 0; h < HOLDERS; h++) {
      const at = slot * HOLDERS + h;
      if (unchecked(this.holder[at]) == endpoint) return this.alive(endpoint, unchecked(this.stamp[at]));
    }
    return false;
  }

  /** Records that the decision's prefix is (about to be) cached on its endpoint. */
  record(d: PrefixDecision): void {
    const e = d.endpoint;
    const cache = this.cache(e);
    const clock = cache.clock;
    this.tick++;
    for (let k = 0; k < d.count; k++) {
      const slot = this.claim(unchecked(d.keys[k]));
      unchecked(this.lastUse[slot] = this.tick);
      this.hold(slot, e, clock);
    }
    cache.clock = clock + <u64>d.newBlocks;
  }

  private cache(e: u64): PodCache {
    const caches = this.caches;
    if (caches.has(e)) return caches.get(e);
    const c = new PodCache();
    caches.set(e, c);
    return c;
  }

  private alive(e: u64, stamp: u64): bool {
    if (!this.caches.has(e)) return false;
    const c = this.caches.get(e);
    return c.clock - stamp < c.capacity;
  }

  /** Puts `e` among the slot's holders, replacing the holder whose copy is oldest by its own clock. */
  private hold(slot: i32, e: u64, clock: u64): void {
    const base = slot * HOLDERS;
    let victim = 0;
    let victimAge: u64 = 0;
    for (let h = 0; h < HOLDERS; h++) {
      const other = unchecked(this.holder[base + h]);
      if (other == e || other == 0) {
        victim = h;
        break;
      }
      const age = this.cache(other).clock - unchecked(this.stamp[base + h]);
      if (age >= victimAge) {
        victim = h;
        victimAge = age;
      }
    }
    unchecked(this.holder[base + victim] = e);
    unchecked(this.stamp[base + victim] = clock);
  }

  private find(key: u64): i32 {
    const k = key == 0 ? 1 : key;
    const mask = SLOTS - 1;
    for (let i = 0; i < PROBE; i++) {
      const slot = (<i32>k + i) & mask;
      if (unchecked(this.keys[slot]) == k) return slot;
    }
    return -1;
  }

  /** The key's slot, taking an empty one or the least recently used in its probe window. */
  private claim(key: u64): i32 {
    const k = key == 0 ? 1 : key;
    const mask = SLOTS - 1;
    let victim = -1;
    let oldest = u64.MAX_VALUE;
    for (let i = 0; i < PROBE; i++) {
      const slot = (<i32>k + i) & mask;
      const have = unchecked(this.keys[slot]);
      if (have == k) return slot;
      const use = have == 0 ? 0 : unchecked(this.lastUse[slot]);
      if (use < oldest) {
        oldest = use;
        victim = slot;
      }
    }
    unchecked(this.keys[victim] = k);
    for (let h = 0; h < HOLDERS; h++) unchecked(this.holder[victim * HOLDERS + h] = 0);
    return victim;
  }
}
