// The link's part in sharing passive-health verdicts between Envoy replicas
// (the format: core/fleet/peer-health.ts): on its share tick it reports this
// Envoy's running ejections when they changed, and writes each fan-out's
// ejections of the other Envoys to a key of their own, stamped with when
// they arrived, for the workers' ticks (gateway/shared-health.ts). When its
// stream ends it empties that key: a gone aggregator leaves no ejections.
import { getSharedData, HostBytes, setSharedData } from "../abi/hostcalls";
import { HealthLedger } from "../core/fleet/health";
import { decodeEjections, ejectionsSignature, encodeOwnEjections } from "../core/fleet/peer-health";
import { ProtoWriter } from "../core/wire/proto";
import { HEALTH_KEY, PEER_EJECTIONS_KEY } from "./shared-health";

const HELLO_EJECTIONS: u32 = 7;
const NONE = new ArrayBuffer(0);

export class PeerHealth {
  private bytes: HostBytes = new HostBytes();
  /** What the last report said (null: nothing reported on this stream yet). */
  private last: string | null = null;
  private held: bool = false;

  start(): void {
    this.last = null;
  }

  /** Appends this Envoy's ejections as Hello.ejections when they changed; false when they did not. */
  appendReport(hello: ProtoWriter, nowMs: u64): bool {
    let ledger: HealthLedger | null = null;
    if (getSharedData(HEALTH_KEY, this.bytes)) {
      ledger = HealthLedger.decode(this.bytes.ptr, this.bytes.len);
      this.bytes.release();
    }
    if (ledger == null) ledger = new HealthLedger();
    const signature = ejectionsSignature(ledger, nowMs);
    const last = this.last;
    if (last != null && last == signature) return false;
    this.last = signature;
    hello.bytesField(HELLO_EJECTIONS, encodeOwnEjections(ledger, nowMs));
    return true;
  }

  /** A fan-out's peer_ejections, for the workers; false when they are not ejections (the caller drops the stream). */
  receive(ptr: usize, len: i32, nowMs: u64): bool {
    if (!decodeEjections(ptr, len, nowMs, new Map<string, u64>())) return false;
    const value = new ArrayBuffer(8 + len);
    store<u64>(changetype<usize>(value), nowMs);
    memory.copy(changetype<usize>(value) + 8, ptr, <usize>len);
    setSharedData(PEER_EJECTIONS_KEY, changetype<usize>(value), value.byteLength, 0);
    this.held = true;
    return true;
  }

  /** The stream ended: the others' ejections no longer hold here. */
  stop(): void {
    if (!this.held) return;
    this.held = false;
    setSharedData(PEER_EJECTIONS_KEY, changetype<usize>(NONE), 0, 0);
  }
}
