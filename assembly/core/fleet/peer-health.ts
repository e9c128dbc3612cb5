// Passive-health verdicts shared between Envoy replicas (health.ts has the
// ledger): a pod one Envoy ejected is avoided by the others until that
// ejection ends, instead of each paying its own failures to learn it.
//
// The wire (Hello.ejections up, Snapshot.peer_ejections down) carries what
// is left of each ejection, not its end: another host's clock is not this
// one's. u32 count, then per ejection: u32 address length, the address,
// u32 milliseconds left. The link keeps the others' ejections in a key of
// their own (u64 when received on this clock, then the fan-out's bytes), so
// nothing of theirs is ever reported back as this Envoy's.
import { HealthLedger } from "./health";

/** More than any fleet has pods; past it (or an address past MAX_ADDRESS) the bytes are not ours. */
const MAX_EJECTIONS: u32 = 100_000;
const MAX_ADDRESS: u32 = 1_024;
/** An ejection is reported as at most this long (a day): the ledger never ejects longer. */
const MAX_LEFT_MS: u64 = 86_400_000;

/** This Envoy's ejections still running at `nowMs`, in the wire's form. */
export function encodeOwnEjections(ledger: HealthLedger, nowMs: u64): ArrayBuffer {
  const keys = ledger.records.keys();
  const names = new Array<ArrayBuffer>();
  const left = new Array<u32>();
  let size = 4;
  for (let i = 0; i < keys.length; i++) {
    const until = ledger.records.get(keys[i]).ejectedUntilMs;
    if (until <= nowMs) continue;
    const name = String.UTF8.encode(keys[i]);
    names.push(name);
    left.push(<u32>min<u64>(until - nowMs, MAX_LEFT_MS));
    size += 8 + name.byteLength;
  }
  const out = new ArrayBuffer(size);
  const base = changetype<usize>(out);
  store<u32>(base, <u32>names.length);
  let pos: usize = 4;
  for (let i = 0; i < names.length; i++) {
    const name = unchecked(names[i]);
    store<u32>(base + pos, <u32>name.byteLength);
    memory.copy(base + pos + 4, changetype<usize>(name), <usize>name.byteLength);
    pos += 4 + <usize>name.byteLength;
    store<u32>(base + pos, unchecked(left[i]));
    pos += 4;
  }
  return out;
}

/**
 * The ejections in wire bytes into `out` (address -> end on this clock,
 * `receivedMs` plus what was left; the later end kept); false when the
 * bytes are not ejections (`out` then partly filled: discard it).
 */
export function decodeEjections(ptr: usize, len: i32, receivedMs: u64, out: Map<string, u64>): bool {
  if (len < 4) return false;
  const end = ptr + <usize>len;
  const count = load<u32>(ptr);
  if (count > MAX_EJECTIONS) return false;
  let pos = ptr + 4;
  for (let i: u32 = 0; i < count; i++) {
    if (end - pos < 8) return false;
    const n = load<u32>(pos);
    if (n == 0 || n > MAX_ADDRESS || <usize>n > end - pos - 8) return false;
    const address = String.UTF8.decodeUnsafe(pos + 4, <usize>n);
    pos += 4 + <usize>n;
    const left = <u64>load<u32>(pos);
    pos += 4;
    if (left > MAX_LEFT_MS) return false;
    const until = receivedMs + left;
    if (!out.has(address) || out.get(address) < until) out.set(address, until);
  }
  return pos == end;
}

/** What this Envoy's running ejections are (addresses and ends): a report is due when it changes. */
export function ejectionsSignature(ledger: HealthLedger, nowMs: u64): string {
  const keys = ledger.records.keys();
  let out = "";
  for (let i = 0; i < keys.length; i++) {
    const until = ledger.records.get(keys[i]).ejectedUntilMs;
    if (until > nowMs) out += keys[i] + "@" + until.toString() + " ";
  }
  return out;
}
