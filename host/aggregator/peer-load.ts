/**
 * The control plane's side of in-flight sharing between Envoy replicas
 * (the filter's side and both wire formats: assembly/core/fleet/peer-load.ts).
 * Each connected Envoy reports the entries of its own table that changed;
 * this keeps every Envoy's latest figures and their sum, and every round
 * gives each Envoy the entries of the *others'* sum that changed since it
 * was last told (all of them on its first round). An Envoy whose stream
 * ended is forgotten at once: its figures leave the sum, and the next round
 * tells the others. The members are numbered in the order they joined, so
 * each Envoy can lean toward a share of the pods of its own
 * (assembly/core/scheduling/replica-lean.ts).
 */

import { ByteReader } from "./byte-reader.js";

/** Requests in flight, those before their first token, and those's prompt tokens. */
type Figures = [count: number, prefilling: number, tokens: number];

interface Member {
  own: Map<bigint, Figures>;
  /** What it was last told of the others' sum, per pod. */
  told: Map<bigint, Figures>;
  /** Ids whose hash it has been told (on this stream). */
  named: Set<number>;
  /** Not yet sent a round: its first is the whole sum of the others. */
  fresh: boolean;
}

export class PeerLoadMerge {
  private members = new Map<string, Member>();
  private total = new Map<bigint, Figures>();
  /** Pods whose sum changed since the last round. */
  private changed = new Set<bigint>();
  private ids = new Map<bigint, number>();

  get size(): number {
    return this.members.size;
  }

  /** Applies one report of `envoy` (joining it on its first); throws on bytes that are not a report, naming the fault. */
  take(envoy: string, report: Uint8Array): void {
    let m = this.members.get(envoy);
    if (!m) {
      m = { own: new Map(), told: new Map(), named: new Set(), fresh: true };
      this.members.set(envoy, m);
    }
    const entries = decodeReport(report);
    let added = 0;
    for (const [hash, figures] of entries) if (figures[0] > 0 && !m.own.has(hash)) added++;
    // Memory here and in every other Envoy's fan-out grows with the pods named: a stream naming more than any fleet has is not an Envoy's.
    if (m.own.size + added > MAX_PODS_PER_ENVOY) throw new Error(`in-flight report: more than ${MAX_PODS_PER_ENVOY} pods with requests in flight`);
    for (const [hash, figures] of entries) {
      const before = m.own.get(hash) ?? ZERO;
      if (figures[0] > 0) m.own.set(hash, figures);
      else m.own.delete(hash);
      this.addToTotal(hash, figures, before);
    }
  }

  /** The envoy's place among the members (0-based, in the order they joined) and how many there are. */
  placeOf(envoy: string): { index: number; count: number } | undefined {
    let index = 0;
    for (const key of this.members.keys()) {
      if (key === envoy) return { index, count: this.members.size };
      index++;
    }
    return undefined;
  }

  /** The envoy's stream ended: its figures no longer count. */
  forget(envoy: string): void {
    const m = this.members.get(envoy);
    if (!m) return;
    this.members.delete(envoy);
    for (const [hash, figures] of m.own) this.addToTotal(hash, ZERO, figures);
  }

  /** One round: per member that reported, the fan-out to send it (empty: nothing changed for it). */
  round(): Map<string, Uint8Array> {
    const out = new Map<string, Uint8Array>();
    for (const [envoy, m] of this.members) {
      const pods = m.fresh ? new Set([...this.total.keys(), ...m.told.keys()]) : this.changed;
      m.fresh = false;
      const w = new ByteWriter();
      for (const hash of pods) {
        const all = this.total.get(hash) ?? ZERO;
        const mine = m.own.get(hash) ?? ZERO;
        const others: Figures = [all[0] - mine[0], all[1] - mine[1], all[2] - mine[2]];
        const told = m.told.get(hash) ?? ZERO;
        if (others[0] === told[0] && others[1] === told[1] && others[2] === told[2]) continue;
        if (others[0] > 0) m.told.set(hash, others);
        else m.told.delete(hash);
        let id = this.ids.get(hash);
        if (id === undefined) {
          id = this.ids.size;
          this.ids.set(hash, id);
        }
        const named = m.named.has(id);
        w.varint(id * 2 + (named ? 0 : 1));
        if (!named) {
          w.fixed64(hash);
          m.named.add(id);
        }
        // A pod with no requests left has no prefilling ones either.
        const count = Math.max(others[0], 0);
        const prefilling = count === 0 ? 0 : Math.min(Math.max(others[1], 0), count);
        w.varint(count);
        w.varint(prefilling);
        w.varint(prefilling === 0 ? 0 : Math.max(others[2], 0));
      }
      out.set(envoy, w.finish());
    }
    this.changed.clear();
    return out;
  }

  private addToTotal(hash: bigint, now: Figures, before: Figures): void {
    if (now[0] === before[0] && now[1] === before[1] && now[2] === before[2]) return;
    const t = this.total.get(hash) ?? ZERO;
    const sum: Figures = [t[0] + now[0] - before[0], t[1] + now[1] - before[1], t[2] + now[2] - before[2]];
    if (sum[0] > 0) this.total.set(hash, sum);
    else this.total.delete(hash);
    this.changed.add(hash);
  }
}

const ZERO: Figures = [0, 0, 0];

/** Pods one Envoy may report requests in flight to (far above any fleet; the filter's reader keeps at most 2^20 ids). */
export const MAX_PODS_PER_ENVOY = 100_000;
/** Requests one Envoy may report in flight to one pod: its pool cluster's circuit breaker (envoy/gateway.yaml max_requests). */
export const MAX_INFLIGHT_PER_POD = 100_000;

/** A report's entries: u64 hash (little-endian), varint count, prefilling, tokens. */
export function decodeReport(bytes: Uint8Array): Array<[bigint, Figures]> {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const r = new ByteReader(bytes, "in-flight report");
  const entries: Array<[bigint, Figures]> = [];
  while (r.more) {
    if (r.at + 8 > bytes.byteLength) throw new Error(`in-flight report: truncated entry at byte ${r.at}`);
    const hash = view.getBigUint64(r.at, true);
    r.skip(8);
    const count = r.varint();
    const prefilling = r.varint();
    const tokens = r.varint();
    if (prefilling > count) throw new Error(`in-flight report: more prefilling than in flight at byte ${r.at}`);
    if (count > MAX_INFLIGHT_PER_POD) throw new Error(`in-flight report: ${count} requests in flight to one pod, above the ${MAX_INFLIGHT_PER_POD} Envoy allows, at byte ${r.at}`);
    entries.push([hash, [count, prefilling, tokens]]);
  }
  return entries;
}

class ByteWriter {
  private bytes: number[] = [];

  varint(v: number): void {
    while (v >= 0x80) {
      this.bytes.push((v % 0x80) | 0x80);
      v = Math.floor(v / 0x80);
    }
    this.bytes.push(v);
  }

  fixed64(v: bigint): void {
    for (let i = 0n; i < 64n; i += 8n) this.bytes.push(Number((v >> i) & 0xffn));
  }

  finish(): Uint8Array {
    return Uint8Array.from(this.bytes);
  }
}
