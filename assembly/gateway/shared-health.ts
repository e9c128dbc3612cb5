// The passive-health ledger (core/fleet/health.ts) shared by every worker through
// one shared-data key, so a pod one worker saw failing is avoided by all.
// Writes happen only when an outcome changes the ledger (a failure, or the
// first success after failures) and use compare-and-swap; reads happen on the
// refresh tick and decode only when the key's CAS moved. The other Envoy
// replicas' ejections come in a key of their own, which the link writes
// (peer-health.ts) and the tick reads when the link says it published.
import { utf8 } from "../abi/hostcalls";
import { HealthLedger, HealthRules } from "../core/fleet/health";
import { decodeEjections } from "../core/fleet/peer-health";
import { SharedValue } from "./shared-value";

export const HEALTH_KEY: ArrayBuffer = utf8("llm_gateway.health");
export const PEER_EJECTIONS_KEY: ArrayBuffer = utf8("llm_gateway.peer_ejections");

// Workers rarely collide; a bounded loop keeps a pathological case cheap.
const CAS_ATTEMPTS = 8;

export class SharedHealth {
  ledger: HealthLedger = new HealthLedger();
  rules: HealthRules = new HealthRules();
  private seenCas: u32 = 0;
  private value: SharedValue = new SharedValue(HEALTH_KEY);
  private peerValue: SharedValue = new SharedValue(PEER_EJECTIONS_KEY);
  /** The snapshot cell's count of fan-outs the link published, as loaded last. */
  private peersLoaded: u64 = 0;

  /** Reloads the ledger if another worker changed it; true when it did. */
  refresh(): bool {
    const v = this.value;
    if (!v.read()) return false;
    let changed = false;
    if (v.cas != this.seenCas) {
      const decoded = HealthLedger.decode(v.bytes.ptr, v.bytes.len);
      if (decoded != null) {
        decoded.peers = this.ledger.peers;
        this.ledger = decoded;
        this.seenCas = v.cas;
        changed = true;
      }
    }
    v.bytes.release();
    return changed;
  }

  /**
   * Loads the link's copy of the other Envoys' ejections (u64 received-at,
   * then their wire bytes) when the link published a fan-out since
   * (`published`: the snapshot cell's count), so an idle tick reads nothing
   * more; true when they changed.
   */
  loadPeers(published: u64): bool {
    if (published == this.peersLoaded) return false;
    this.peersLoaded = published;
    const v = this.peerValue;
    const had = this.ledger.peers.size > 0;
    const peers = new Map<string, u64>();
    if (v.read()) {
      const ok = v.bytes.len >= 8 && decodeEjections(v.bytes.ptr + 8, v.bytes.len - 8, load<u64>(v.bytes.ptr), peers);
      v.bytes.release();
      if (!ok) peers.clear();
    }
    this.ledger.peers = peers;
    return had || peers.size > 0;
  }

  recordFailure(address: string, nowMs: u64, eject: bool = false): void {
    for (let i = 0; i < CAS_ATTEMPTS; i++) {
      this.load();
      this.ledger.recordFailure(address, nowMs, this.rules, eject);
      if (this.store()) return;
    }
  }

  recordSaturated(address: string, nowMs: u64): void {
    for (let i = 0; i < CAS_ATTEMPTS; i++) {
      this.load();
      this.ledger.recordSaturated(address, nowMs, this.rules);
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
    const peers = this.ledger.peers;
    this.ledger = decoded != null ? decoded : new HealthLedger();
    this.ledger.peers = peers;
  }

  private store(): bool {
    const bytes = this.ledger.encode();
    return this.value.write(changetype<usize>(bytes), bytes.byteLength);
  }
}
