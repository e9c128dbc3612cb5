// Requests refused for lack of room, remembered until their Retry-After has
// passed (plus some grace), so that the retry a client was told to make can be
// told apart from new work: it is admitted up to a limit halfway to the next
// class's (core/scheduling/admission.ts, retryLimit). The preference is earned by
// waiting: a copy sent before its Retry-After is new work, and the refusal it
// gets starts the wait again. Without that, a
// retry that lands while the pool is still saturated competes with the very
// overload that refused it. The key is the hash of the whole body: a retry
// resends the same request, and a client gains nothing by sending one twice
// (the first copy must be refused, and the memory is used once).
//
// Every worker shares one memory (a retry may come on another connection):
// RefusalLedger is how the router reaches it, read only when a request finds
// no room, so the ordinary path pays nothing.

/** Longest the memory grows; the entries closest to expiry go first. */
const MAX_ENTRIES: i32 = 1024;
const ENTRY_BYTES: i32 = 24;

export class RefusalMemory {
  private hashes: u64[] = [];
  /** A retry counts from here (the refusal's Retry-After)... */
  private notBefores: u64[] = [];
  /** ...until here. */
  private expiries: u64[] = [];

  get size(): i32 {
    return this.hashes.length;
  }

  clear(): void {
    this.hashes.length = 0;
    this.notBefores.length = 0;
    this.expiries.length = 0;
  }

  /** Remembers a refused body as retried from `notBeforeMs` until `expiryMs`; expired entries are dropped on the way. */
  remember(hash: u64, notBeforeMs: u64, expiryMs: u64, nowMs: u64): void {
    this.forgetExpired(nowMs);
    const i = this.hashes.indexOf(hash);
    if (i >= 0) {
      unchecked(this.notBefores[i] = notBeforeMs);
      unchecked(this.expiries[i] = expiryMs);
      return;
    }
    if (this.hashes.length >= MAX_ENTRIES) this.removeAt(this.soonest());
    this.hashes.push(hash);
    this.notBefores.push(notBeforeMs);
    this.expiries.push(expiryMs);
  }

  /**
   * True, and forgotten, if `hash` was refused and comes back within its
   * window. Before the window it is kept (and false): the client did not wait.
   */
  take(hash: u64, nowMs: u64): bool {
    const i = this.hashes.indexOf(hash);
    if (i < 0 || nowMs < unchecked(this.notBefores[i])) return false;
    const live = unchecked(this.expiries[i]) > nowMs;
    this.removeAt(i);
    return live;
  }

  encodedLength(): i32 {
    return 4 + this.hashes.length * ENTRY_BYTES;
  }

  encodeInto(ptr: usize): void {
    const n = this.hashes.length;
    store<u32>(ptr, <u32>n);
    for (let i = 0; i < n; i++) {
      const at = ptr + 4 + <usize>(i * ENTRY_BYTES);
      store<u64>(at, unchecked(this.hashes[i]));
      store<u64>(at + 8, unchecked(this.notBefores[i]));
      store<u64>(at + 16, unchecked(this.expiries[i]));
    }
  }

  /** False (and empty) when the bytes are not an encoding of this class. */
  decode(ptr: usize, len: i32): bool {
    this.clear();
    if (len == 0) return true;
    if (len < 4) return false;
    const n = <i64>load<u32>(ptr);
    if (n > <i64>MAX_ENTRIES || <i64>len != 4 + n * ENTRY_BYTES) return false;
    for (let i = 0; i < <i32>n; i++) {
      const at = ptr + 4 + <usize>(i * ENTRY_BYTES);
      this.hashes.push(load<u64>(at));
      this.notBefores.push(load<u64>(at + 8));
      this.expiries.push(load<u64>(at + 16));
    }
    return true;
  }

  private forgetExpired(nowMs: u64): void {
    let k = 0;
    for (let i = 0; i < this.hashes.length; i++) {
      if (unchecked(this.expiries[i]) <= nowMs) continue;
      unchecked(this.hashes[k] = this.hashes[i]);
      unchecked(this.notBefores[k] = this.notBefores[i]);
      unchecked(this.expiries[k] = this.expiries[i]);
      k++;
    }
    this.hashes.length = k;
    this.notBefores.length = k;
    this.expiries.length = k;
  }

  private soonest(): i32 {
    let best = 0;
    for (let i = 1; i < this.expiries.length; i++) if (unchecked(this.expiries[i]) < unchecked(this.expiries[best])) best = i;
    return best;
  }

  private removeAt(i: i32): void {
    const last = this.hashes.length - 1;
    unchecked(this.hashes[i] = this.hashes[last]);
    unchecked(this.notBefores[i] = this.notBefores[last]);
    unchecked(this.expiries[i] = this.expiries[last]);
    this.hashes.length = last;
    this.notBefores.length = last;
    this.expiries.length = last;
  }
}

/**
 * Where the router keeps the memory: the filter's shared data (every worker's
 * refusals), or the native caller's bytes. Called only for requests that find
 * no room.
 */
export abstract class RefusalLedger {
  /** True, and forgotten, if a body with `hash` was refused and may still be retried. */
  abstract take(hash: u64, nowMs: u64): bool;
  /** Remembers a refused body as retried from `notBeforeMs` until `expiryMs`. */
  abstract remember(hash: u64, notBeforeMs: u64, expiryMs: u64, nowMs: u64): void;
}

/** A ledger in this instance's own memory (the native build, fed and read as bytes by its caller). */
export class LocalRefusals extends RefusalLedger {
  readonly memory: RefusalMemory = new RefusalMemory();

  take(hash: u64, nowMs: u64): bool {
    return this.memory.take(hash, nowMs);
  }

  remember(hash: u64, notBeforeMs: u64, expiryMs: u64, nowMs: u64): void {
    this.memory.remember(hash, notBeforeMs, expiryMs, nowMs);
  }
}
