/**
 * The control plane's side of sharing prefix placements between Envoy
 * replicas (the link's side and the record layout:
 * assembly/core/prefix/prefix-share.ts). Each sharing Envoy reports the
 * records its workers wrote since its last report; every share round each
 * member is sent the records the *others* reported since the previous round,
 * oldest first, and the round's records are then let go: a placement is a
 * hint for the next few requests, not state to replay to a newcomer.
 * A fan-out is capped in bytes; past the cap the oldest records are dropped
 * (and counted), the newest being the likeliest still in the pod's cache.
 */
import { ByteReader } from "./byte-reader.js";

/** Default cap on one fan-out's records: ~360 records of ten keys, a round at ~18,000 routed requests per second across the replicas at 20 ms. */
export const DEFAULT_PEER_PREFIX_CAP_BYTES = 32 * 1024;

/** The largest key count a record may carry (assembly/core/prefix/prefix-keys.ts MAX_KEYS). */
const MAX_KEYS = 10;

interface Reported {
  from: string;
  record: Uint8Array;
}

export class PeerPrefixMerge {
  private members = new Set<string>();
  /** The round's records in the order they arrived, whoever sent them. */
  private records: Reported[] = [];
  private droppedCount = 0;

  constructor(private readonly capBytes = DEFAULT_PEER_PREFIX_CAP_BYTES) {}

  /** Records left out of fan-outs by the cap so far (counted once per member not sent one). */
  get dropped(): number {
    return this.droppedCount;
  }

  /** Takes one report of `envoy` (joining it on its first, which may be empty); throws on bytes that are not records, naming the fault. */
  take(envoy: string, report: Uint8Array): void {
    const records = splitRecords(report);
    this.members.add(envoy);
    for (const record of records) this.records.push({ from: envoy, record });
  }

  /** The envoy's stream ended: it is sent nothing more, and its records of this round still go to the others (they were true when sent). */
  forget(envoy: string): void {
    this.members.delete(envoy);
  }

  /** One round: per member, the others' records of the round, newest kept within the cap (empty: none). */
  round(): Map<string, Uint8Array> {
    const out = new Map<string, Uint8Array>();
    for (const envoy of this.members) {
      let bytes = 0;
      let from = this.records.length;
      let others = 0;
      for (let i = this.records.length - 1; i >= 0; i--) {
        const r = this.records[i];
        if (r.from === envoy) continue;
        others++;
        if (bytes + r.record.byteLength > this.capBytes) continue;
        bytes += r.record.byteLength;
        from = i;
      }
      const fanOut = new Uint8Array(bytes);
      let at = 0;
      let kept = 0;
      for (let i = from; i < this.records.length && at < bytes; i++) {
        const r = this.records[i];
        if (r.from === envoy || at + r.record.byteLength > bytes) continue;
        fanOut.set(r.record, at);
        at += r.record.byteLength;
        kept++;
      }
      this.droppedCount += others - kept;
      out.set(envoy, fanOut);
    }
    this.records = [];
    return out;
  }
}

/** A report's records, each a view of its bytes; throws on bytes that are not records. */
export function splitRecords(bytes: Uint8Array): Uint8Array[] {
  const records: Uint8Array[] = [];
  const r = new ByteReader(bytes, "prefix records");
  while (r.more) {
    const start = r.at;
    r.skip(8);
    if (r.varint() > 0xffffffff) throw new Error(`prefix records: new blocks out of range at byte ${start}`);
    const keys = r.varint();
    if (keys > MAX_KEYS) throw new Error(`prefix records: ${keys} keys (at most ${MAX_KEYS}) at byte ${start}`);
    r.skip(keys * 8);
    records.push(bytes.subarray(start, r.at));
  }
  return records;
}
