// The in-flight figures Envoy replicas exchange through the control plane
// (SnapshotService.Watch): each reports its own, the aggregator sums the
// others' for each (host/aggregator/peer-load.ts) and sends them back. Both
// directions carry only the endpoints whose figures changed since the last
// message, as absolute figures (0 = none left), so a message lost to a
// reconnect is healed by the full table a new stream starts with.
//
// Report (Hello.inflight), per entry: u64 address hash (8 bytes,
// little-endian), varint count, varint prefilling streams, varint their
// prompt tokens.
//
// Fan-out (Snapshot.peer_inflight), per entry: varint (id << 1 | named),
// then, when named, the u64 address hash the stream's id stands for from now
// on, then the three varints. Ids (small numbers the aggregator gives
// endpoints) keep the 8-byte hash to an endpoint's first mention on a
// stream: the fan-out carries the other replicas' changes, ~R-1 times the
// report's.
import { ProtoReader, ProtoWriter } from "../wire/proto";
import { InflightTable } from "./inflight";

/** A reader that keeps more ids than this was not fed by our aggregator (bounded memory). */
const MAX_IDS: i32 = 1 << 20;

/** What this gateway reports: its own figures that changed since the previous report. */
export class ReportEncoder {
  private last: InflightTable = new InflightTable();
  private next: InflightTable = new InflightTable();

  /** The entries of `current` (own figures) that differ from the last report, appended to `out`; returns how many. */
  encode(current: InflightTable, out: ProtoWriter): i32 {
    const a = this.last;
    let i = 0;
    let j = 0;
    let n = 0;
    while (i < a.size || j < current.size) {
      const ha = i < a.size ? a.hashAt(i) : u64.MAX_VALUE;
      const hb = j < current.size ? current.hashAt(j) : u64.MAX_VALUE;
      if (i < a.size && j < current.size && ha == hb) {
        if (a.countAt(i) != current.countAt(j) || a.prefillingAt(i) != current.prefillingAt(j) || a.prefillTokensAt(i) != current.prefillTokensAt(j)) {
          writeEntry(out, hb, current.countAt(j), current.prefillingAt(j), current.prefillTokensAt(j));
          n++;
        }
        i++;
        j++;
      } else if (j >= current.size || (i < a.size && ha < hb)) {
        writeEntry(out, ha, 0, 0, 0);
        n++;
        i++;
      } else {
        writeEntry(out, hb, current.countAt(j), current.prefillingAt(j), current.prefillTokensAt(j));
        n++;
        j++;
      }
    }
    // Remember what was reported (a copy: the caller's table goes on changing).
    const copy = this.next;
    copy.clear();
    for (let k = 0; k < current.size; k++) copy.set(current.hashAt(k), current.countAt(k), current.prefillingAt(k), current.prefillTokensAt(k));
    this.next = this.last;
    this.last = copy;
    return n;
  }

  /** A new stream: the next report is the whole table. */
  reset(): void {
    this.last.clear();
  }
}

function writeEntry(out: ProtoWriter, hash: u64, count: i32, streams: i32, tokens: i32): void {
  out.fixed64(hash);
  out.varint(<u64>max(count, 0));
  out.varint(<u64>max(streams, 0));
  out.varint(<u64>max(tokens, 0));
}

/** The other replicas' figures as the fan-out left them: `sum`'s own part holds them (decodePeers' input once encoded). */
export class PeerLoad {
  readonly sum: InflightTable = new InflightTable();
  private ids: Map<u32, u64> = new Map();

  /** Applies one fan-out; false (and nothing applied past the fault) if it is not one. */
  apply(ptr: usize, len: i32): bool {
    const r = ProtoReader.over(ptr, len);
    while (r.more()) {
      const head = r.varint();
      const id = <u32>(head >> 1);
      let hash: u64 = 0;
      if ((head & 1) != 0) {
        hash = r.fixed64();
        if (!r.ok || (!this.ids.has(id) && this.ids.size >= MAX_IDS)) return false;
        this.ids.set(id, hash);
      } else if (this.ids.has(id)) {
        hash = this.ids.get(id);
      } else {
        return false;
      }
      const count = r.varint();
      const streams = r.varint();
      const tokens = r.varint();
      if (!r.ok || count > <u64>i32.MAX_VALUE || streams > count || tokens > <u64>i32.MAX_VALUE) return false;
      this.sum.set(hash, <i32>count, <i32>streams, <i32>tokens);
    }
    return r.ok;
  }

  /** A new stream (or none): no peers' figures, no ids. */
  reset(): void {
    this.sum.clear();
    this.ids.clear();
  }
}
