// The link's part in sharing queue boards between Envoy replicas (the pure
// part and the format: core/queueing/peer-queues.ts): on its share tick it
// reports what this Envoy's workers hold when that changed, and each
// fan-out's peer_queues replaces the other Envoys' summaries on the shared
// board (compare-and-swap, as the workers write it). The link renews them
// well within the board's stale bound while its stream lasts, and takes
// them off when the stream ends: a gone aggregator leaves no phantom queues.
import { ProtoWriter } from "../core/wire/proto";
import { QueueShare } from "../core/queueing/peer-queues";
import { QUEUES_KEY } from "./shared-queue-board";
import { SharedValue } from "./shared-value";

const HELLO_QUEUES: u32 = 6;
const CAS_ATTEMPTS = 8;
/** The board drops a summary not renewed within 1 s: renew the adopted ones at half that. */
const RENEW_MS: u64 = 500;
const NO_PEERS: ArrayBuffer = new ArrayBuffer(4);

export class PeerQueues {
  private share: QueueShare = new QueueShare();
  private value: SharedValue = new SharedValue(QUEUES_KEY);
  /** The last fan-out's summaries (a board's encoding); none adopted yet when null. */
  private peers: ArrayBuffer | null = null;
  private renewAtMs: u64 = 0;

  /** A new stream: the first report is sent whole, and no peers' summaries are held. */
  start(): void {
    this.share.reset();
    this.peers = null;
  }

  /** Appends this Envoy's summaries as Hello.queues when they changed; false when they did not. */
  appendReport(hello: ProtoWriter): bool {
    let report: ArrayBuffer | null;
    if (this.value.read()) {
      report = this.share.report(this.value.bytes.ptr, this.value.bytes.len);
      this.value.bytes.release();
    } else {
      report = this.share.report(0, 0);
    }
    if (report == null) return false;
    hello.bytesField(HELLO_QUEUES, report);
    return true;
  }

  /** A fan-out's peer_queues: adopted at once; false when the bytes are not a board. */
  receive(ptr: usize, len: i32, nowMs: u64): bool {
    const peers = new ArrayBuffer(len);
    memory.copy(changetype<usize>(peers), ptr, <usize>len);
    if (!this.adopt(peers, nowMs)) return false;
    this.peers = peers;
    return true;
  }

  /** On the link's tick: the adopted summaries renewed before the workers would drop them. */
  tick(nowMs: u64): void {
    const peers = this.peers;
    if (peers != null && nowMs >= this.renewAtMs) this.adopt(peers, nowMs);
  }

  /** The stream ended: the others' summaries leave the board. */
  stop(nowMs: u64): void {
    if (this.peers == null) return;
    this.peers = null;
    this.adopt(NO_PEERS, nowMs);
  }

  private adopt(peers: ArrayBuffer, nowMs: u64): bool {
    this.renewAtMs = nowMs + RENEW_MS;
    const v = this.value;
    for (let attempt = 0; attempt < CAS_ATTEMPTS; attempt++) {
      let merged: ArrayBuffer | null;
      if (v.read()) {
        merged = this.share.merge(v.bytes.ptr, v.bytes.len, changetype<usize>(peers), peers.byteLength, nowMs);
        v.bytes.release();
      } else {
        merged = this.share.merge(0, 0, changetype<usize>(peers), peers.byteLength, nowMs);
      }
      if (merged == null) return false;
      if (v.write(changetype<usize>(merged), merged.byteLength)) return true;
    }
    // Contended beyond reason: the next renewal tries again.
    return true;
  }
}
