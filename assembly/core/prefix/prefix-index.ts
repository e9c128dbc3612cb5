// Which endpoints probably hold a prompt prefix in their KV cache, learned
// from routing decisions (the engines' caches are not visible to a proxy).
// Like the reference picker's index, an endpoint's cache is modelled as an
// LRU of its KV capacity in blocks: every request routed to it writes its
// uncached blocks, and a prefix counts as evicted once that many newer blocks
// were written after it was last used there. Unlike it, every worker applies
// the decisions of every other worker too (gateway/shared-prefix-log.ts, or
// the caller of the native build), so all workers agree on where a prefix is.
// LoRA adapter placements travel with them in the same decisions and go to
// the adapter slots' model instead (core/fleet/adapter-slots.ts).
//
// Fixed memory: an open-addressing table of prefix keys, each with up to
// HOLDERS endpoints; a full probe window replaces its least recently used key.
// A key with HOLDERS live holders counts as held everywhere.
import { MAX_KEYS, PrefixKeys } from "./prefix-keys";
import { AdapterSlots } from "../fleet/adapter-slots";
import { DEFAULT_KV_BLOCKS, PodCache } from "../fleet/pod-cache";
import { Pool, retainCurrent, Snapshot } from "../fleet/snapshot";
import { PrefixMatch } from "./prefix-match";

const SLOTS: i32 = 4096; // power of two
const PROBE: i32 = 8;
export const HOLDERS: i32 = 8;
/** A 64-byte block of prompt is ~16 tokens at ~4 bytes per token. */
const TOKENS_PER_BLOCK: u64 = 16;
/**
 * The first key of an adapter's placement, its hash the second: no block
 * hash is this but by a 2^-64 chance. So the log, the replicas' wire records
 * and the control plane carry placements unchanged, and an index that does
 * not know the mark takes them for a prefix no prompt starts with.
 */
const ADAPTER_PLACEMENT: u64 = 0x4c6f5241_506c6163; // "LoRAPlac"

/** One routing decision as the index and the shared log see it. */
export class PrefixDecision {
  endpoint: u64 = 0;
  /** Blocks the request adds to the endpoint's cache (its prompt minus the matched part). */
  newBlocks: u32 = 0;
  keys: StaticArray<u64> = new StaticArray<u64>(MAX_KEYS);
  count: i32 = 0;

  /** Makes this the placement of an adapter (its name's hash) on `endpoint`. */
  placeAdapter(endpoint: u64, adapter: u64): void {
    this.endpoint = endpoint;
    this.newBlocks = 0;
    this.count = 2;
    unchecked(this.keys[0] = ADAPTER_PLACEMENT);
    unchecked(this.keys[1] = adapter);
  }

  /** The adapter this decision places, or 0 for a prompt's. */
  get adapter(): u64 {
    return this.count == 2 && unchecked(this.keys[0]) == ADAPTER_PLACEMENT ? unchecked(this.keys[1]) : 0;
  }
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
  /** Where adapters were placed: the decisions that place one go there. */
  readonly adapters: AdapterSlots = new AdapterSlots();

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

  /** Drops the modelled caches (and adapter placements) of endpoints long gone (snapshot.ts retainCurrent). */
  retainOnly(snap: Snapshot): void {
    this.caches = retainCurrent(this.caches, snap);
    this.adapters.retainOnly(snap);
  }

  /** Records that the decision's prefix is (about to be) cached on its endpoint, or where it placed an adapter. */
  record(d: PrefixDecision): void {
    const adapter = d.adapter;
    if (adapter != 0) {
      this.adapters.place(d.endpoint, adapter);
      return;
    }
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
