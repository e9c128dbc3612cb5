// Prefix placements Envoy replicas exchange through the control plane
// (SnapshotService.Watch): the link reports the records its workers appended
// to the shared prefix log since its last report (Hello.prefix_records), the
// aggregator sends each Envoy the other Envoys' records of the round
// (Snapshot.peer_prefix_records, host/aggregator/peer-prefix.ts), and the
// link appends those to its own log under its own writer id, so its workers
// replay them as they replay each other's and the link never reports them
// back. Placements are hints: a record lost to a reconnect or to the
// aggregator's cap only leaves a peer's model of a cache a little behind.
// LoRA adapter placements are records too (prefix-index.ts placeAdapter:
// two keys, a mark and the adapter's hash), so they travel unchanged.
//
// Record on the wire, both directions (concatenated, no count: the bytes
// field's length bounds them):
// - u64 endpoint, 8 bytes little-endian: an address hash, as wide as a
//   varint of it would be on average, and fixed so it needs no decoding;
// - varint new blocks: usually well under 128, so one byte where the ring
//   spends four;
// - varint key count (<= MAX_KEYS): one byte, and keys past it are not sent
//   (the ring keeps all ten slots);
// - that many u64 keys, 8 bytes little-endian: block hashes, incompressible.
// The ring's writer and reserved words stay home: the receiver stamps its own.
// Records that added no block (a prompt the pod held whole) go like the
// others: they refresh the placement in the peers' models of that pod's
// cache, and in the simulator's prefix scenarios none occurred (0 of 12,262
// reported records), so leaving them out would save nothing there
// (docs/replicas.md).
import { ProtoReader, ProtoWriter } from "../wire/proto";
import { PrefixDecision } from "./prefix-index";
import { MAX_KEYS } from "./prefix-keys";
import { LOG_SLOTS, PrefixLogReader } from "./prefix-log";

/**
 * The link's writer id on the prefix log, for the other replicas' records it
 * appends: no worker has it (gateway/worker-id.ts hands out ids from 1, its
 * fallback sets the high bits; the native build's are odd), so every worker
 * replays them and the link, skipping its own, never reports them back.
 */
export const LINK_WRITER: u32 = 0;

/** What the link reports: the log's records since its last report, except its own (the peers'). */
export class PrefixShareReporter {
  private reader: PrefixLogReader = new PrefixLogReader();
  private scratch: PrefixDecision = new PrefixDecision();

  /** Appends to `out` the records of the log value at `ptr` written since the last call by anyone but `link`; returns how many. */
  encode(ptr: usize, len: i32, link: u32, out: ProtoWriter): i32 {
    if (!this.reader.begin(ptr, len)) return 0;
    const d = this.scratch;
    let n = 0;
    while (this.reader.next(link, d)) {
      out.fixed64(d.endpoint);
      out.varint(<u64>d.newBlocks);
      out.varint(<u64>d.count);
      for (let k = 0; k < d.count; k++) out.fixed64(unchecked(d.keys[k]));
      n++;
    }
    return n;
  }
}

/** The records of one fan-out, decoded for appending to the log (prefix-log.ts appendRecords). */
export class PrefixRecordBatch {
  /** The newest LOG_SLOTS records at most: the ring holds no more. */
  readonly decisions: PrefixDecision[] = [];
  count: i32 = 0;

  /** Decodes `len` bytes of records; false (and count 0) if they are not records. */
  decode(ptr: usize, len: i32): bool {
    this.count = 0;
    const total = walk(ptr, len, null, 0);
    if (total < 0) return false;
    const skip = max(total - LOG_SLOTS, 0);
    const n = total - skip;
    while (this.decisions.length < n) this.decisions.push(new PrefixDecision());
    walk(ptr, len, this.decisions, skip);
    this.count = n;
    return true;
  }
}

/** Reads every record (into `into` from the `skip`-th on, when given); returns how many there are, or -1 if the bytes are not records. */
function walk(ptr: usize, len: i32, into: PrefixDecision[] | null, skip: i32): i32 {
  const r = ProtoReader.over(ptr, len);
  let n = 0;
  while (r.more()) {
    const endpoint = r.fixed64();
    const newBlocks = r.varint();
    const count = r.varint();
    if (!r.ok || newBlocks > <u64>u32.MAX_VALUE || count > <u64>MAX_KEYS) return -1;
    const d = into != null && n >= skip ? unchecked(into[n - skip]) : null;
    if (d != null) {
      d.endpoint = endpoint;
      d.newBlocks = <u32>newBlocks;
      d.count = <i32>count;
    }
    for (let k = 0; k < <i32>count; k++) {
      const key = r.fixed64();
      if (d != null) unchecked(d.keys[k] = key);
    }
    if (!r.ok) return -1;
    n++;
  }
  return r.ok ? n : -1;
}
