// Passive health, learned from how routed requests ended (core/fleet/outcome.ts):
// a pod that fails `threshold` times in a row (a 5xx, a broken answer) is
// ejected for `ejectMs`, and one that made Envoy move a request to another
// pod (it refused, reset, 5xx'd or let its deadline pass before answering)
// at once: every request it gets would cost a retry, or wait out a deadline.
// Afterwards one request may try it again (a failure re-ejects at once, a
// success clears the record). A saturated pod (it answered 429 or 503 itself)
// is only passed over for `saturatedBackoffMs`, with no failure counted: it is
// whole, just full, and the others take its share meanwhile. All workers
// share one ledger through shared data (gateway/shared-health.ts); this file
// is the pure part: the rules and the byte encoding.

import { Snapshot } from "./snapshot";

export class HealthRecord {
  failures: u32 = 0;
  ejectedUntilMs: u64 = 0;
}

export class HealthRules {
  threshold: u32 = 3;
  ejectMs: u64 = 10_000;
  saturatedBackoffMs: u64 = 1_000;
}

export class HealthLedger {
  records: Map<string, HealthRecord> = new Map();
  /** The other Envoy replicas' ejections (address -> end on this clock; peer-health.ts): avoided alike, never encoded here. */
  peers: Map<string, u64> = new Map();

  /** Counts a failure (`eject`: one that ejects at once); true if the ledger changed. */
  recordFailure(address: string, nowMs: u64, rules: HealthRules, eject: bool = false): bool {
    let r: HealthRecord;
    if (this.records.has(address)) {
      r = this.records.get(address);
    } else {
      r = new HealthRecord();
      this.records.set(address, r);
    }
    r.failures++;
    if (eject && r.failures < rules.threshold) r.failures = rules.threshold;
    if (r.failures >= rules.threshold) r.ejectedUntilMs = nowMs + rules.ejectMs;
    return true;
  }

  /** Passes over a saturated pod for the rules' back-off, counting no failure; true (the ledger changed). */
  recordSaturated(address: string, nowMs: u64, rules: HealthRules): bool {
    let r: HealthRecord;
    if (this.records.has(address)) {
      r = this.records.get(address);
    } else {
      r = new HealthRecord();
      this.records.set(address, r);
    }
    const until = nowMs + rules.saturatedBackoffMs;
    if (until > r.ejectedUntilMs) r.ejectedUntilMs = until;
    return true;
  }

  /** Forgets an address's failures; true if there were any. */
  recordSuccess(address: string): bool {
    if (!this.records.has(address)) return false;
    this.records.delete(address);
    return true;
  }

  hasFailures(address: string): bool {
    return this.records.has(address);
  }

  ejectedUntil(address: string): u64 {
    const own = this.records.has(address) ? this.records.get(address).ejectedUntilMs : 0;
    if (this.peers.size == 0 || !this.peers.has(address)) return own;
    const theirs = this.peers.get(address);
    return theirs > own ? theirs : own;
  }

  /** Copies ejection deadlines onto a snapshot's endpoints, where the picker reads them. */
  applyTo(snap: Snapshot): void {
    for (let p = 0; p < snap.pools.length; p++) {
      const pool = snap.pools[p];
      const endpoints = pool.endpoints;
      for (let i = 0; i < endpoints.length; i++) endpoints[i].ejectedUntilMs = this.ejectedUntil(endpoints[i].address);
      pool.healthEpoch++;
    }
  }

  /** u32 count, then per record: u32 address length, address bytes, u32 failures, u64 ejected-until. */
  encode(): ArrayBuffer {
    const keys = this.records.keys();
    const encoded = new Array<ArrayBuffer>(keys.length);
    let size = 4;
    for (let i = 0; i < keys.length; i++) {
      encoded[i] = String.UTF8.encode(keys[i]);
      size += 4 + encoded[i].byteLength + 12;
    }
    const out = new ArrayBuffer(size);
    const base = changetype<usize>(out);
    store<u32>(base, <u32>keys.length);
    let pos: usize = 4;
    for (let i = 0; i < keys.length; i++) {
      const key = encoded[i];
      const r = this.records.get(keys[i]);
      store<u32>(base + pos, <u32>key.byteLength);
      memory.copy(base + pos + 4, changetype<usize>(key), <usize>key.byteLength);
      pos += 4 + <usize>key.byteLength;
      store<u32>(base + pos, r.failures);
      store<u64>(base + pos + 4, r.ejectedUntilMs);
      pos += 12;
    }
    return out;
  }

  /** Null if the bytes are not a ledger this code wrote. */
  static decode(ptr: usize, len: i32): HealthLedger | null {
    const ledger = new HealthLedger();
    if (len == 0) return ledger;
    if (len < 4) return null;
    const end = ptr + <usize>len;
    const count = load<u32>(ptr);
    let pos = ptr + 4;
    for (let i: u32 = 0; i < count; i++) {
      if (pos + 4 > end) return null;
      const keyLen = <usize>load<u32>(pos);
      if (keyLen > end - pos - 4 || end - pos - 4 - keyLen < 12) return null;
      const r = new HealthRecord();
      const key = String.UTF8.decodeUnsafe(pos + 4, keyLen);
      pos += 4 + keyLen;
      r.failures = load<u32>(pos);
      r.ejectedUntilMs = load<u64>(pos + 4);
      pos += 12;
      ledger.records.set(key, r);
    }
    return pos == end ? ledger : null;
  }
}
