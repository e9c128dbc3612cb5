// The passive-health ledger (core/health.ts) shared by every worker through
// one shared-data key, so a pod one worker saw failing is avoided by all.
// Writes happen only when an outcome changes the ledger (a failure, or the
// first success after failures) and use compare-and-swap; reads happen on the
// refresh tick and decode only when the key's CAS moved.
import { getSharedData, HostBytes, lastCas, setSharedData, Status, utf8 } from "../abi/hostcalls";
import { HealthLedger, HealthRules } from "../core/health";

const KEY = utf8("llm_gateway.health");
// Workers rarely collide; a bounded loop keeps a pathological case cheap.
const CAS_ATTEMPTS = 8;

export class SharedHealth {
  ledger: HealthLedger = new HealthLedger();
  rules: HealthRules = new HealthRules();
  private seenCas: u32 = 0;
  private bytes: HostBytes = new HostBytes();

  /** Reloads the ledger if another worker changed it; true when it did. */
  refresh(): bool {
    if (!getSharedData(KEY, this.bytes)) return false;
    const cas = lastCas();
    let changed = false;
    if (cas != this.seenCas) {
      const decoded = HealthLedger.decode(this.bytes.ptr, this.bytes.len);
      if (decoded != null) {
        this.ledger = decoded;
        this.seenCas = cas;
        changed = true;
      }
    }
    this.bytes.release();
    return changed;
  }

  recordFailure(address: string, nowMs: u64): void {
    for (let i = 0; i < CAS_ATTEMPTS; i++) {
      const cas = this.load();
      this.ledger.recordFailure(address, nowMs, this.rules);
      if (this.store(cas)) return;
    }
  }

  recordSuccess(address: string): void {
    for (let i = 0; i < CAS_ATTEMPTS; i++) {
      const cas = this.load();
      if (!this.ledger.recordSuccess(address)) return;
      if (this.store(cas)) return;
    }
  }

  /** The current shared ledger into `ledger`; returns the CAS to write against (0 = key absent). */
  private load(): u32 {
    if (!getSharedData(KEY, this.bytes)) {
      this.ledger = new HealthLedger();
      return 0;
    }
    const cas = lastCas();
    const decoded = HealthLedger.decode(this.bytes.ptr, this.bytes.len);
    this.bytes.release();
    this.ledger = decoded != null ? decoded : new HealthLedger();
    return cas;
  }

  private store(cas: u32): bool {
    const bytes = this.ledger.encode();
    return setSharedData(KEY, changetype<usize>(bytes), bytes.byteLength, cas) != Status.CasMismatch;
  }
}
