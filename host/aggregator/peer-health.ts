/**
 * The control plane's side of sharing passive-health verdicts between Envoy
 * replicas (the filter's side and the format: assembly/core/fleet/peer-health.ts).
 * Each sharing Envoy reports its running ejections when they change, as what
 * is left of each; this keeps their ends on its own clock and, on the share
 * round, sends each Envoy the others' (the later end where two ejected the
 * same pod) when some other Envoy's changed since it was last sent them.
 * An Envoy whose stream ended is forgotten: its ejections no longer hold.
 */

import { LatestReports } from "./latest-reports.js";

const MAX_EJECTIONS = 100_000;
const MAX_ADDRESS = 1024;
const MAX_LEFT_MS = 86_400_000;

export class PeerHealthMerge {
  /** Per Envoy: address -> end of its ejection, on this clock. */
  private reports = new LatestReports<Map<string, number>>();

  constructor(private readonly now: () => number = Date.now) {}

  /** Applies `envoy`'s report (joining it on its first); throws on bytes that are not ejections, naming the fault. */
  take(envoy: string, report: Uint8Array): void {
    const at = this.now();
    const ends = new Map<string, number>();
    for (const [address, left] of decodeEjections(report)) ends.set(address, Math.max(ends.get(address) ?? 0, at + left));
    this.reports.set(envoy, ends);
  }

  forget(envoy: string): void {
    this.reports.forget(envoy);
  }

  /** The others' running ejections for `envoy` (the wire's encoding) when they changed since it was last sent them; undefined otherwise. */
  fanOut(envoy: string): Uint8Array | undefined {
    const others = this.reports.othersIfChanged(envoy);
    if (!others) return undefined;
    const at = this.now();
    const ends = new Map<string, number>();
    for (const other of others) {
      for (const [address, end] of other) if (end > at && end > (ends.get(address) ?? 0)) ends.set(address, end);
    }
    return encodeEjections([...ends].map(([address, end]) => [address, end - at]));
  }
}

/** Ejections' wire bytes: u32 count, then per ejection u32 address length, address (UTF-8), u32 ms left. */
export function encodeEjections(entries: Array<[string, number]>): Uint8Array {
  const names = entries.map(([a]) => Buffer.from(a, "utf8"));
  const out = new Uint8Array(4 + names.reduce((n, b) => n + 8 + b.byteLength, 0));
  const view = new DataView(out.buffer);
  view.setUint32(0, entries.length, true);
  let at = 4;
  entries.forEach(([, left], i) => {
    view.setUint32(at, names[i].byteLength, true);
    out.set(names[i], at + 4);
    at += 4 + names[i].byteLength;
    view.setUint32(at, Math.min(Math.max(Math.round(left), 0), MAX_LEFT_MS), true);
    at += 4;
  });
  return out;
}

/** The ejections in wire bytes, or throws naming the fault. */
export function decodeEjections(bytes: Uint8Array): Array<[string, number]> {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (bytes.byteLength < 4) throw new Error(`ejections: ${bytes.byteLength} bytes, no count`);
  const count = view.getUint32(0, true);
  if (count > MAX_EJECTIONS) throw new Error(`ejections: ${count}, more than ${MAX_EJECTIONS}`);
  const out: Array<[string, number]> = [];
  let at = 4;
  for (let i = 0; i < count; i++) {
    if (bytes.byteLength - at < 8) throw new Error(`ejections: truncated at byte ${at}`);
    const n = view.getUint32(at, true);
    if (n === 0 || n > MAX_ADDRESS || n > bytes.byteLength - at - 8) throw new Error(`ejections: bad address length ${n} at byte ${at}`);
    const address = Buffer.from(bytes.subarray(at + 4, at + 4 + n)).toString("utf8");
    at += 4 + n;
    const left = view.getUint32(at, true);
    at += 4;
    if (left > MAX_LEFT_MS) throw new Error(`ejections: ${left} ms left at byte ${at}, more than a day`);
    out.push([address, left]);
  }
  if (at !== bytes.byteLength) throw new Error(`ejections: ${bytes.byteLength - at} bytes past the last`);
  return out;
}
