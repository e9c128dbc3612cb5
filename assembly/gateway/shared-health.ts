// The passive-health ledger (core/fleet/health.ts) shared by every worker through
// one shared-data key, so a pod one worker saw failing is avoided by all.
// Writes happen only when an outcome changes the ledger (a failure, or the
// first success after failures) and use compare-and-swap; reads happen on the
// refresh tick and decode only when the key's CAS moved.
import { utf8 } from "../abi/hostcalls";
import { HealthLedger, HealthRules } from "../core/fleet/health";
import { SharedValue } from "./shared-value";

// Workers rarely collide; a bounded loop keeps a pathological case cheap.
const CAS_ATTEMPTS = 8;

export class SharedHealth {
  ledger: HealthLedger = new HealthLedger();
  rules: HealthRules = new HealthRules();
  private seenCas: u32 = 0;
  private value: SharedValue = new SharedValue(utf8("llm_gateway.health"));

  /** Reloads the ledger if another worker changed it; true when it did. */
  refresh(): bool {
    const v = this.value;
    if (!v.read()) return false;
    let changed = false;
    if (v.cas != this.seenCas) {
      const decoded = HealthLedger.decode(v.bytes.ptr, v.bytes.len);
      if (decoded != null) {
        this.ledger = decoded;
        this.seenCas = v.cas;
        changed = true;
      }
    }
    v.bytes.release();
    return changed;
  }

  recordFailure(address: string, nowMs: u64, eject: bool = false): void {
    for (let i = 0; i < CAS_ATTEMPTS; i++) {
      this.load();
      this.ledger.recordFailure(address, nowMs, this.rules, eject);
      if (this.store()) return;
    }
  }

  recordSuccess(address: string): void {
    for (let i = 0; i < CAS_ATTEMPTS; i++) {
      this.load();
      if (!this.ledger.recordSuccess(address)) return;
      if (this.store()) return;
    }
  }

  /** The current shared ledger into `ledger` (empty when absent or unreadable). */
  private load(): void {
    const v = this.value;
    if (!v.read()) {
      this.ledger = new HealthLedger();
      return;
    }
    const decoded = HealthLedger.decode(v.bytes.ptr, v.bytes.len);
    v.bytes.release();
    this.ledger = decoded != null ? decoded : new HealthLedger();
  }

  private store(): bool {
    const bytes = this.ledger.encode();
    return this.value.write(changetype<usize>(bytes), bytes.byteLength);
  }
}
