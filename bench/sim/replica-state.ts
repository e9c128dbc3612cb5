/**
 * What one replica of our gateway tells the others through the control
 * plane in the proposed design (a model: neither the filter nor the
 * aggregator does it yet): its requests in flight per pod and the prefix
 * placements its workers recorded. The replica's shared data is changed as
 * the filter would change it on receiving the merged state:
 *
 * - in flight: the shared table holds the replica's own counts plus the
 *   others' as last received; a new round swaps the others' part, so the
 *   pods the others loaded count as picks since the snapshot, as this
 *   replica's own do;
 * - prefix placements: the others' records are appended to the replica's
 *   prefix log, which its workers replay on their next tick as they replay
 *   each other's.
 *
 * Byte layouts are the routing core's (assembly/core/fleet/inflight.ts,
 * assembly/core/prefix/prefix-log.ts).
 */
import type { NativeSharedData } from "../../testing/native/shared-data.js";
import type { StateSharing } from "./state-sharing.js";

/** Per pod (address hash): requests in flight, those still before their first token, and those's prompt tokens. */
type Counts = Map<bigint, [number, number, number]>;

const ENTRY_BYTES = 20;

export function decodeInflight(bytes: Uint8Array): Counts {
  const counts: Counts = new Map();
  if (bytes.byteLength < 4) return counts;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const n = view.getUint32(0, true);
  for (let i = 0; i < n; i++) {
    const at = 4 + i * ENTRY_BYTES;
    counts.set(view.getBigUint64(at, true), [view.getInt32(at + 8, true), view.getInt32(at + 12, true), view.getInt32(at + 16, true)]);
  }
  return counts;
}

/** The core's encoding: sorted by hash, positive counts only, prefill within the count. */
export function encodeInflight(counts: Counts): Uint8Array {
  const entries = [...counts].filter(([, [n]]) => n > 0).sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  const bytes = new Uint8Array(4 + entries.length * ENTRY_BYTES);
  const view = new DataView(bytes.buffer);
  view.setUint32(0, entries.length, true);
  entries.forEach(([hash, [n, streams, tokens]], i) => {
    const at = 4 + i * ENTRY_BYTES;
    const s = Math.min(Math.max(streams, 0), n);
    view.setBigUint64(at, hash, true);
    view.setInt32(at + 8, n, true);
    view.setInt32(at + 12, s, true);
    view.setInt32(at + 16, s === 0 ? 0 : Math.max(tokens, 0), true);
  });
  return bytes;
}

/** a + sign * b, field by field. */
function combine(a: Counts, b: Counts, sign: 1 | -1): Counts {
  const out: Counts = new Map([...a].map(([h, v]) => [h, [...v] as [number, number, number]]));
  for (const [h, v] of b) {
    const c = out.get(h) ?? [0, 0, 0];
    out.set(h, [Math.max(0, c[0] + sign * v[0]), Math.max(0, c[1] + sign * v[1]), Math.max(0, c[2] + sign * v[2])]);
  }
  return out;
}

const LOG_SLOTS = 512;
const RECORD_BYTES = 104;
const LOG_HEADER = 8;
const LOG_BYTES = LOG_HEADER + LOG_SLOTS * RECORD_BYTES;

/** The records written to a prefix log from `from` on (at most the ring's worth), with their sequence numbers. */
function recordsSince(log: Uint8Array, from: number): { records: Uint8Array[]; written: number } {
  if (log.byteLength !== LOG_BYTES) return { records: [], written: 0 };
  const written = Number(new DataView(log.buffer, log.byteOffset).getBigUint64(0, true));
  const records: Uint8Array[] = [];
  for (let seq = Math.max(from, written - LOG_SLOTS); seq < written; seq++) {
    const at = LOG_HEADER + (seq % LOG_SLOTS) * RECORD_BYTES;
    records.push(log.slice(at, at + RECORD_BYTES));
  }
  return { records, written };
}

/** The log with `records` appended (a new log when there was none); returns it and the sequence number of the first appended. */
function appendRecords(log: Uint8Array, records: readonly Uint8Array[]): { log: Uint8Array; first: number } {
  const out = log.byteLength === LOG_BYTES ? log.slice() : new Uint8Array(LOG_BYTES);
  const view = new DataView(out.buffer);
  const first = Number(view.getBigUint64(0, true));
  records.forEach((r, i) => out.set(r, LOG_HEADER + ((first + i) % LOG_SLOTS) * RECORD_BYTES));
  view.setBigUint64(0, BigInt(first + records.length), true);
  return { log: out, first };
}

/** Makes the replica take part in `sharing` (nothing happens when it shares nothing). */
export function shareGatewayState(sharing: StateSharing, replica: number, shared: NativeSharedData): void {
  let others: Counts = new Map();
  const own = () => combine(decodeInflight(shared.inflight), others, -1);
  sharing.join<Counts>("inflight", replica, {
    report: own,
    receive(reports) {
      const mine = own();
      others = reports.reduce((sum, r) => combine(sum, r, 1), new Map() as Counts);
      shared.inflight = encodeInflight(combine(mine, others, 1));
    },
  });

  // Sequence ranges of the log that hold the others' records: never reported back.
  const foreign: Array<[number, number]> = [];
  let reported = 0;
  sharing.join<Uint8Array[]>("prefix", replica, {
    report() {
      const { records, written } = recordsSince(shared.prefixLog, reported);
      const start = written - records.length;
      reported = written;
      return records.filter((_, i) => !foreign.some(([a, b]) => start + i >= a && start + i < b));
    },
    receive(reports) {
      const records = reports.flat();
      if (records.length === 0) return;
      const { log, first } = appendRecords(shared.prefixLog, records);
      shared.prefixLog = log;
      foreign.push([first, first + records.length]);
      // Ranges the ring has overwritten can no longer be reported.
      while (foreign.length > 0 && foreign[0][1] <= first + records.length - LOG_SLOTS) foreign.shift();
    },
  });
}
