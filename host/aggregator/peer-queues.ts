/**
 * The control plane's side of sharing queue boards between Envoy replicas
 * (the filter's side and the format: assembly/core/queueing/peer-queues.ts,
 * queue-board.ts). Each sharing Envoy reports what its workers hold when
 * that changes; every round sends each Envoy the others' summaries when they
 * changed since it was last sent them. Worker ids are numbered per Envoy, so
 * each Envoy's writers are renumbered into a space of their own: the foreign
 * writers' bit pattern, the member's number and the worker's low bits.
 */

import { LatestReports } from "./latest-reports.js";

const RECORD_BYTES = 72;
/** As the board keeps at most (writers x pools with held requests). */
const MAX_RECORDS = 1024;
const FOREIGN_WRITER = 0x40000000;
const WRITER_SPACE = 0xc0000000;
/** Members are numbered in 14 bits beside the foreign pattern (the lowest free number on joining). */
const MEMBER_NUMBERS = 1 << 14;

interface Reported {
  number: number;
  /** Its summaries, writers renumbered. */
  records: Uint8Array[];
}

export class PeerQueueMerge {
  private reports = new LatestReports<Reported>();

  /** Applies `envoy`'s report (joining it on its first); throws on bytes that are not one, naming the fault. */
  take(envoy: string, report: Uint8Array): void {
    const records = decodeBoard(report, "queue report");
    const number = this.reports.get(envoy)?.number ?? this.freeNumber();
    for (const r of records) {
      const view = new DataView(r.buffer, r.byteOffset, RECORD_BYTES);
      const writer = view.getUint32(0, true);
      if ((writer & WRITER_SPACE) >>> 0 === FOREIGN_WRITER) throw new Error("queue report: a summary of another Envoy's (foreign writer id)");
      view.setUint32(0, (FOREIGN_WRITER | (number << 16) | (writer & 0xffff)) >>> 0, true);
    }
    this.reports.set(envoy, { number, records });
  }

  private freeNumber(): number {
    const used = new Set(this.reports.values().map((r) => r.number));
    for (let n = 0; n < MEMBER_NUMBERS; n++) if (!used.has(n)) return n;
    throw new Error(`queue report: more than ${MEMBER_NUMBERS} Envoys share`);
  }

  forget(envoy: string): void {
    this.reports.forget(envoy);
  }

  /** The others' summaries for `envoy` (a board's encoding) when they changed since it was last sent them; undefined otherwise. */
  fanOut(envoy: string): Uint8Array | undefined {
    const others = this.reports.othersIfChanged(envoy);
    if (!others) return undefined;
    const kept = others.flatMap((o) => o.records).slice(0, MAX_RECORDS);
    const out = new Uint8Array(4 + kept.length * RECORD_BYTES);
    new DataView(out.buffer).setUint32(0, kept.length, true);
    kept.forEach((r, i) => out.set(r, 4 + i * RECORD_BYTES));
    return out;
  }
}

/** A board's summaries (copies), or throws naming the fault. */
export function decodeBoard(bytes: Uint8Array, what: string): Uint8Array[] {
  if (bytes.byteLength < 4) throw new Error(`${what}: ${bytes.byteLength} bytes, not a queue board (at least 4)`);
  const n = new DataView(bytes.buffer, bytes.byteOffset, 4).getUint32(0, true);
  if (n > MAX_RECORDS) throw new Error(`${what}: ${n} summaries, more than the ${MAX_RECORDS} a board keeps`);
  if (bytes.byteLength !== 4 + n * RECORD_BYTES) throw new Error(`${what}: ${bytes.byteLength} bytes for ${n} summaries of ${RECORD_BYTES}`);
  return Array.from({ length: n }, (_, i) => bytes.slice(4 + i * RECORD_BYTES, 4 + (i + 1) * RECORD_BYTES));
}
