// The link's pure part in sharing queue boards between Envoy replicas
// (queue-board.ts; the host calls are gateway/peer-queues.ts): what this
// Envoy's workers hold goes up as a report, and what the others hold comes
// down and takes the place of their last summaries on this Envoy's board.
// Both directions use the board's own encoding (u32 count, 72-byte
// summaries), so "nothing held" is 4 bytes, never an absent field.
import { QueueBoard } from "./queue-board";

/** Where a summary's updated-at time sits: zeroed in a report, as the receiver stamps its own. */
const UPDATED_AT: usize = 16;
const RECORD_BYTES: usize = 72;

export class QueueShare {
  private board: QueueBoard = new QueueBoard();
  private peers: QueueBoard = new QueueBoard();
  private last: ArrayBuffer | null = null;

  /** A new stream: the next report is sent whatever the last said. */
  reset(): void {
    this.last = null;
  }

  /**
   * This Envoy's own summaries from the shared board's bytes (`len` 0: no
   * board), when they differ from the last report; null when they do not
   * (or the bytes are not a board, which the workers rewrite on their next change).
   */
  report(ptr: usize, len: i32): ArrayBuffer | null {
    const board = this.board;
    if (len > 0 && !board.decode(ptr, len)) return null;
    if (len == 0) board.clear();
    board.keep(false);
    const out = new ArrayBuffer(board.encodedLength());
    const at = changetype<usize>(out);
    board.encodeInto(at);
    const n = <usize>load<u32>(at);
    for (let i: usize = 0; i < n; i++) store<u64>(at + 4 + i * RECORD_BYTES + UPDATED_AT, 0);
    const last = this.last;
    if (last != null && last.byteLength == out.byteLength && memory.compare(changetype<usize>(last), at, <usize>out.byteLength) == 0) return null;
    this.last = out;
    return out;
  }

  /**
   * The shared board's bytes (`len` 0: none yet) with the others'
   * summaries replaced by `peers` (a board's encoding), stamped `nowMs`;
   * null when `peers` does not decode.
   */
  merge(ptr: usize, len: i32, peersPtr: usize, peersLen: i32, nowMs: u64): ArrayBuffer | null {
    if (!this.peers.decode(peersPtr, peersLen)) return null;
    // A board that does not decode is no fault of the fan-out's: it starts anew (the workers rewrite theirs on their next change).
    const board = this.board;
    if (len == 0 || !board.decode(ptr, len)) board.clear();
    board.adopt(this.peers, nowMs);
    const out = new ArrayBuffer(board.encodedLength());
    board.encodeInto(changetype<usize>(out));
    return out;
  }
}
