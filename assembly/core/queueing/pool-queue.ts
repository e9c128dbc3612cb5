// A pool's held requests: one fair queue per class, Critical served before
// Standard before Sheddable; and all pools' queues of one worker, under one
// bound on the bytes and requests held.
import { Priority } from "../fleet/priority";
import { FairQueue } from "./fair-queue";
import { HeldRequest } from "./held-request";

/** Classes in the order they are served. */
export const SERVICE_ORDER: StaticArray<Priority> = [Priority.Critical, Priority.Standard, Priority.Sheddable];

/** A class's place in SERVICE_ORDER: 0 is served first. */
export function serviceRank(p: Priority): i32 {
  return p == Priority.Critical ? 0 : p == Priority.Standard ? 1 : 2;
}

export class PoolQueue {
  /** By service rank. */
  readonly classes: StaticArray<FairQueue> = [new FairQueue(), new FairQueue(), new FairQueue()];
  count: i32 = 0;
  /** This worker's completions per second in the pool, as last measured (what it publishes on the board). */
  drain: f64 = 0;

  constructor(public readonly name: string, public readonly nameHash: u64) {}

  /** The request served next: the first class's fair choice. */
  next(): HeldRequest | null {
    for (let r = 0; r < 3; r++) {
      const h = unchecked(this.classes[r]).peek();
      if (h != null) return h;
    }
    return null;
  }

  /** Requests held here that are served before a new one of class `p` (its own class and those above). */
  ahead(p: Priority): i32 {
    let n = 0;
    const rank = serviceRank(p);
    for (let r = 0; r <= rank; r++) n += unchecked(this.classes[r]).count;
    return n;
  }
}

export class HoldQueues {
  private pools: Map<string, PoolQueue> = new Map();
  private byId: Map<u32, HeldRequest> = new Map();
  /** Which pool each held request waits in. */
  private poolOf: Map<u32, PoolQueue> = new Map();
  /** Envoy holds each body in its own buffer; the bound keeps their sum in check. */
  maxBytes: i64 = 64 * 1024 * 1024;
  maxRequests: i32 = 4096;
  bytes: i64 = 0;
  count: i32 = 0;

  /** The pool's queue, made on first use (it outlives snapshots, as the pool's name does). */
  pool(name: string, nameHash: u64): PoolQueue {
    if (this.pools.has(name)) return this.pools.get(name);
    const q = new PoolQueue(name, nameHash);
    this.pools.set(name, q);
    return q;
  }

  /** The pools that hold something (a list made per call: only while requests are held). */
  busyPools(): PoolQueue[] {
    const all = this.pools.values();
    const out: PoolQueue[] = [];
    for (let i = 0; i < all.length; i++) if (all[i].count > 0) out.push(all[i]);
    return out;
  }

  /** Every pool queued for so far, empty ones included (their board summaries must be dropped). */
  allPools(): PoolQueue[] {
    return this.pools.values();
  }

  /** Takes out, and returns, the requests whose deadline has passed. */
  expired(nowMs: u64): HeldRequest[] {
    const out: HeldRequest[] = [];
    const all = this.byId.values();
    for (let i = 0; i < all.length; i++) if (nowMs >= all[i].deadlineMs) out.push(all[i]);
    for (let i = 0; i < out.length; i++) this.remove(out[i].id);
    return out;
  }

  fits(bytes: i32): bool {
    return this.count < this.maxRequests && this.bytes + <i64>bytes <= this.maxBytes;
  }

  has(id: u32): bool {
    return this.byId.has(id);
  }

  /** Queues `h` in `q`; the pool releases about one request per `spacingMs` (its tenant's fair spacing). */
  add(q: PoolQueue, h: HeldRequest, spacingMs: u64, retry: bool): void {
    unchecked(q.classes[serviceRank(h.request.priority)]).push(h, spacingMs, retry);
    q.count++;
    this.byId.set(h.id, h);
    this.poolOf.set(h.id, q);
    this.bytes += <i64>h.bytes;
    this.count++;
  }

  /** Takes the request `q.next()` returned out of the queue. */
  popNext(q: PoolQueue, h: HeldRequest): void {
    unchecked(q.classes[serviceRank(h.request.priority)]).remove(h);
    this.forget(q, h);
  }

  /** Takes a request out wherever it waits; null if it is not held. */
  remove(id: u32): HeldRequest | null {
    if (!this.byId.has(id)) return null;
    const h = this.byId.get(id);
    const q = this.poolOf.get(id);
    unchecked(q.classes[serviceRank(h.request.priority)]).remove(h);
    this.forget(q, h);
    return h;
  }

  private forget(q: PoolQueue, h: HeldRequest): void {
    q.count--;
    this.byId.delete(h.id);
    this.poolOf.delete(h.id);
    this.bytes -= <i64>h.bytes;
    this.count--;
  }
}
