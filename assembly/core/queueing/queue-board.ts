// What every worker holds, in one shared-data value, so that all of them
// serve one queue order and predict one wait. A worker can only release the
// streams it holds itself (a stream lives in the worker that accepted its
// connection), so each keeps its own queues and publishes a summary per pool:
// per class how many it holds, the fair-queue tag of the request it would
// serve next (a time: fair-queue.ts), and how fast the pool drains for it. A
// worker releases its next request only when no other worker's next one
// comes first (a higher class, or the same class with an earlier tag): the
// globally first request always goes, so the order holds across workers and
// none waits on another for ever. A summary not renewed within STALE_MS is ignored (a worker stopped).
// The room itself is the shared in-flight table every worker already counts.
//
// Envoy replicas put the others' summaries on their boards too (relayed by
// the control plane, peer-queues.ts), so the order and the predicted wait
// span every replica's queues. Worker ids are per Envoy, so the aggregator
// renumbers the others' writers into a space of their own (FOREIGN_WRITER).
import { PoolQueue } from "./pool-queue";

/** Writers of summaries from other Envoys: this bit pattern in the top two bits (a worker's id never has it). */
export const FOREIGN_WRITER: u32 = 0x40000000;
const WRITER_SPACE: u32 = 0xc0000000;

export function isForeignWriter(writer: u32): bool {
  return (writer & WRITER_SPACE) == FOREIGN_WRITER;
}

/** Workers renew their summaries every refresh tick (20 ms by default). */
const STALE_MS: u64 = 1_000;
const RECORD_BYTES: i32 = 72;
/** Summaries kept at most: writers x pools with held requests. */
const MAX_RECORDS: i32 = 1024;

class Summary {
  writer: u32 = 0;
  pool: u64 = 0;
  updatedMs: u64 = 0;
  /** Completions per second of the requests this writer routed to the pool. */
  drain: f64 = 0;
  /** By service rank. */
  readonly counts: StaticArray<u32> = new StaticArray<u32>(3);
  /** Tag of the request the writer serves next in each class (u64.MAX_VALUE: none). */
  readonly nextTag: StaticArray<u64> = new StaticArray<u64>(3);
}

export class QueueBoard {
  private summaries: Summary[] = [];

  /** Something is held somewhere (by any worker, fresh or not): only then is the board consulted per request. */
  get busy(): bool {
    return this.summaries.length > 0;
  }

  clear(): void {
    this.summaries.length = 0;
  }

  /** Loads the shared bytes; false (board cleared) when they are not a board. */
  decode(ptr: usize, len: i32): bool {
    this.summaries.length = 0;
    if (len < 4) return false;
    const n = <i32>load<u32>(ptr);
    if (n > MAX_RECORDS || 4 + n * RECORD_BYTES != len) return false;
    for (let i = 0; i < n; i++) {
      const p = ptr + 4 + <usize>(i * RECORD_BYTES);
      const s = new Summary();
      s.writer = load<u32>(p);
      s.pool = load<u64>(p, 8);
      s.updatedMs = load<u64>(p, 16);
      s.drain = load<f64>(p, 24);
      for (let r = 0; r < 3; r++) {
        unchecked(s.counts[r] = load<u32>(p + 32 + <usize>(r * 4)));
        unchecked(s.nextTag[r] = load<u64>(p + 48 + <usize>(r * 8)));
      }
      this.summaries.push(s);
    }
    return true;
  }

  encodedLength(): i32 {
    return 4 + this.summaries.length * RECORD_BYTES;
  }

  encodeInto(ptr: usize): void {
    const n = this.summaries.length;
    store<u32>(ptr, <u32>n);
    for (let i = 0; i < n; i++) {
      const s = unchecked(this.summaries[i]);
      const p = ptr + 4 + <usize>(i * RECORD_BYTES);
      store<u32>(p, s.writer);
      store<u32>(p, 0, 4);
      store<u64>(p, s.pool, 8);
      store<u64>(p, s.updatedMs, 16);
      store<f64>(p, s.drain, 24);
      for (let r = 0; r < 3; r++) {
        store<u32>(p + 32 + <usize>(r * 4), unchecked(s.counts[r]));
        store<u64>(p + 48 + <usize>(r * 8), unchecked(s.nextTag[r]));
      }
      store<u32>(p, 0, 44);
    }
  }

  /** Keeps only this Envoy's own summaries (`foreign` false) or only the other Envoys' (true). */
  keep(foreign: bool): void {
    const list = this.summaries;
    for (let i = list.length - 1; i >= 0; i--) if (isForeignWriter(unchecked(list[i]).writer) != foreign) list.splice(i, 1);
  }

  /**
   * The other Envoys' summaries become `peers`' (theirs only, as many as
   * fit), stamped `nowMs`: their clocks are not this one's, and the link
   * renews them while its stream lasts.
   */
  adopt(peers: QueueBoard, nowMs: u64): void {
    this.keep(false);
    const theirs = peers.summaries;
    for (let i = 0; i < theirs.length && this.summaries.length < MAX_RECORDS; i++) {
      const s = unchecked(theirs[i]);
      if (!isForeignWriter(s.writer)) continue;
      s.updatedMs = nowMs;
      this.summaries.push(s);
    }
  }

  /** Replaces `writer`'s summary of `q` (dropping it once nothing is held there), and drops stale ones. */
  publish(writer: u32, q: PoolQueue, drain: f64, nowMs: u64): void {
    const list = this.summaries;
    let mine: Summary | null = null;
    for (let i = list.length - 1; i >= 0; i--) {
      const s = unchecked(list[i]);
      if (s.writer == writer && s.pool == q.nameHash) mine = s;
      else if (stale(s, nowMs)) list.splice(i, 1);
    }
    if (q.count == 0) {
      if (mine != null) list.splice(list.indexOf(mine), 1);
      return;
    }
    if (mine == null) {
      if (list.length >= MAX_RECORDS) return;
      mine = new Summary();
      mine.writer = writer;
      mine.pool = q.nameHash;
      list.push(mine);
    }
    mine.updatedMs = nowMs;
    mine.drain = drain;
    for (let r = 0; r < 3; r++) {
      const c = unchecked(q.classes[r]);
      const next = c.peek();
      unchecked(mine.counts[r] = <u32>c.count);
      unchecked(mine.nextTag[r] = next == null ? u64.MAX_VALUE : next.tag);
    }
  }

  /** Requests other workers hold for `pool` at service rank `rank` or before it. */
  othersAhead(pool: u64, rank: i32, writer: u32, nowMs: u64): i32 {
    let n = 0;
    for (let i = 0; i < this.summaries.length; i++) {
      const s = unchecked(this.summaries[i]);
      if (s.pool != pool || s.writer == writer || stale(s, nowMs)) continue;
      for (let r = 0; r <= rank; r++) n += <i32>unchecked(s.counts[r]);
    }
    return n;
  }

  /** The pool's drain as the other workers that hold requests for it measure theirs. */
  othersDrain(pool: u64, writer: u32, nowMs: u64): f64 {
    let d = 0.0;
    for (let i = 0; i < this.summaries.length; i++) {
      const s = unchecked(this.summaries[i]);
      if (s.pool == pool && s.writer != writer && !stale(s, nowMs)) d += s.drain;
    }
    return d;
  }

  /**
   * True when another worker's next request for `pool` is served before one
   * of service rank `rank` tagged `tag` (equal tags: see below).
   */
  othersFirst(pool: u64, rank: i32, tag: u64, writer: u32, nowMs: u64): bool {
    for (let i = 0; i < this.summaries.length; i++) {
      const s = unchecked(this.summaries[i]);
      if (s.pool != pool || s.writer == writer || stale(s, nowMs)) continue;
      for (let r = 0; r < rank; r++) if (unchecked(s.counts[r]) > 0) return true;
      const theirs = unchecked(s.nextTag[rank]);
      // Equal tags: the lower writer id first among this Envoy's workers; another Envoy's never holds one back (their ids
      // are renumbered on each Envoy's board, so no order between them is the same everywhere).
      if (unchecked(s.counts[rank]) > 0 && (theirs < tag || (theirs == tag && s.writer < writer && !isForeignWriter(s.writer)))) return true;
    }
    return false;
  }
}

function stale(s: Summary, nowMs: u64): bool {
  return nowMs > s.updatedMs + STALE_MS;
}
