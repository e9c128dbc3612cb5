// The routing decisions every worker adds to the prefix index, passed between
// workers through one shared-data value: a ring of fixed-size records behind
// a u64 count of records ever written. Each worker appends its own decisions
// on its refresh tick and replays everyone else's it has not seen, so the
// workers' indexes agree within a tick. The filter moves the bytes
// (gateway/shared-prefix-log.ts); this file is the pure part.
//
// Record (104 bytes): u64 endpoint, u32 new blocks, u32 key count, u32 writer,
// u32 reserved, 10 x u64 keys.
import { PrefixDecision, PrefixIndex } from "./prefix-index";
import { MAX_KEYS } from "./prefix-keys";

export const LOG_SLOTS: i32 = 512;
const RECORD_BYTES: i32 = 24 + MAX_KEYS * 8;
const HEADER_BYTES: i32 = 8;
export const LOG_BYTES: i32 = HEADER_BYTES + LOG_SLOTS * RECORD_BYTES;

export class PrefixLogReader {
  /** Records written before this one have been applied (or skipped). */
  cursor: u64 = 0;
  private started: bool = false;
  private ptr: usize = 0;
  private seq: u64 = 0;
  private written: u64 = 0;

  /** Applies the other writers' records in a log value; false if the bytes are not a log. */
  replay(ptr: usize, len: i32, self: u32, index: PrefixIndex, scratch: PrefixDecision): bool {
    if (!this.begin(ptr, len)) return false;
    while (this.next(self, scratch)) index.record(scratch);
    return true;
  }

  /**
   * Starts a pass over a log value's records not yet visited (next() hands
   * them out); false if the bytes are not a log. The index's replay and the
   * link's report to its replicas walk the ring alike.
   */
  begin(ptr: usize, len: i32): bool {
    this.ptr = ptr;
    this.seq = 0;
    this.written = 0;
    if (len == 0) return true;
    if (len != LOG_BYTES) return false;
    const written = load<u64>(ptr);
    // A new (or reloaded) reader takes what the ring still holds.
    let from = this.started ? this.cursor : 0;
    if (from > written) from = 0; // the log was recreated
    if (written - from > <u64>LOG_SLOTS) from = written - <u64>LOG_SLOTS;
    this.seq = from;
    this.written = written;
    this.cursor = written;
    this.started = true;
    return true;
  }

  /** The pass's next record of a writer other than `self`, into `scratch`; false when there is none left. */
  next(self: u32, scratch: PrefixDecision): bool {
    while (this.seq < this.written) {
      const at = recordAt(this.ptr, this.seq++);
      if (load<u32>(at + 16) == self) continue;
      scratch.endpoint = load<u64>(at);
      scratch.newBlocks = load<u32>(at + 8);
      scratch.count = min(<i32>load<u32>(at + 12), MAX_KEYS);
      for (let k = 0; k < scratch.count; k++) unchecked(scratch.keys[k] = load<u64>(at + 24 + <usize>(k * 8)));
      return true;
    }
    return false;
  }
}

/**
 * Appends `pending[0..n)` to the log value at `ptr` (LOG_BYTES long, or 0 to
 * start a new log in place) and returns the new record count.
 */
export function appendRecords(ptr: usize, len: i32, pending: PrefixDecision[], n: i32, self: u32): u64 {
  if (len != LOG_BYTES) memory.fill(ptr, 0, <usize>LOG_BYTES);
  let written = load<u64>(ptr);
  for (let i = 0; i < n; i++) {
    const d = unchecked(pending[i]);
    const at = recordAt(ptr, written++);
    store<u64>(at, d.endpoint);
    store<u32>(at + 8, d.newBlocks);
    store<u32>(at + 12, <u32>d.count);
    store<u32>(at + 16, self);
    store<u32>(at + 20, 0);
    for (let k = 0; k < MAX_KEYS; k++) store<u64>(at + 24 + <usize>(k * 8), k < d.count ? unchecked(d.keys[k]) : 0);
  }
  store<u64>(ptr, written);
  return written;
}

function recordAt(ptr: usize, seq: u64): usize {
  return ptr + <usize>HEADER_BYTES + <usize>(seq % <u64>LOG_SLOTS) * <usize>RECORD_BYTES;
}
