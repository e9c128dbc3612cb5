// The link's part in sharing requests in flight between Envoy replicas
// (core/fleet/peer-load.ts has the formats): every share interval it reads
// the workers' shared table (their own requests; a worker's release reaches
// it on that worker's next write or tick) and sends the changed entries in a
// Hello on the stream; each fan-out from the aggregator updates the peers'
// sum, published for the workers' ticks, with this Envoy's place among the
// replicas (core/scheduling/replica-lean.ts). The same messages carry the
// prefix placements (peer-prefix.ts), the queue boards (peer-queues.ts) and
// the passive-health ejections (peer-health.ts).
// All of it on the link's tick and its stream's messages: nothing on a
// request's path.
import { getSharedData, grpcSend, HostBytes, nowMillis, setSharedData } from "../abi/hostcalls";
import { InflightTable } from "../core/fleet/inflight";
import { PeerLoad, ReportEncoder } from "../core/fleet/peer-load";
import { ProtoReader, ProtoWriter } from "../core/wire/proto";
import { PeerPrefixShare } from "./peer-prefix";
import { INFLIGHT_KEY, PEERS_KEY } from "./shared-inflight";
import { PeerHealth } from "./peer-health";
import { PeerQueues } from "./peer-queues";
import { publishPeersChanged } from "./shared-snapshot";

const HELLO_INFLIGHT: u32 = 3;
const HELLO_SHARES: u32 = 4;
const SNAPSHOT_VERSION: u32 = 1;
const SNAPSHOT_PEER_INFLIGHT: u32 = 6;
const SNAPSHOT_REPLICA_INDEX: u32 = 7;
const SNAPSHOT_REPLICA_COUNT: u32 = 8;
const SNAPSHOT_PEER_PREFIX_RECORDS: u32 = 9;
const SNAPSHOT_PEER_QUEUES: u32 = 10;
const SNAPSHOT_PEER_EJECTIONS: u32 = 11;

export const enum FanOut { No, Applied, Malformed }

export class PeerShare {
  private reports: ReportEncoder = new ReportEncoder();
  private peers: PeerLoad = new PeerLoad();
  private prefixes: PeerPrefixShare = new PeerPrefixShare();
  private own: InflightTable = new InflightTable();
  private queues: PeerQueues = new PeerQueues();
  private health: PeerHealth = new PeerHealth();
  private bytes: HostBytes = new HostBytes();
  private out: ArrayBuffer = new ArrayBuffer(256);
  private nextReportMs: u64 = 0;
  /** This Envoy's place among the sharing replicas, as the aggregator last numbered them (count 0: alone). */
  private replicaIndex: u32 = 0;
  private replicaCount: u32 = 0;

  constructor(private intervalMs: u64) {}

  get enabled(): bool {
    return this.intervalMs > 0;
  }

  /** A new stream: the first report is the whole table, the peers' sum starts empty. */
  start(hello: ProtoWriter): void {
    this.reports.reset();
    this.peers.reset();
    this.replicaCount = 0;
    this.queues.start();
    this.health.start();
    hello.varintField(HELLO_SHARES, 1);
    this.appendReport(hello);
    this.prefixes.report(hello);
    this.queues.appendReport(hello);
    this.health.appendReport(hello, nowMillis());
  }

  /** The stream ended: no peers' figures outlive it (the aggregator forgets this Envoy's likewise). */
  stop(version: u64, heardMs: u64): void {
    this.peers.reset();
    this.replicaCount = 0;
    this.queues.stop(heardMs);
    this.health.stop();
    this.publishPeers(version, heardMs);
  }

  /** On the link's tick: a report when the interval is up and something changed (or prefix records were written). */
  tick(token: u32, nowMs: u64): void {
    if (nowMs < this.nextReportMs) return;
    this.nextReportMs = nowMs + this.intervalMs;
    this.queues.tick(nowMs);
    const hello = new ProtoWriter();
    const inflight = this.appendReport(hello);
    const prefixes = this.prefixes.report(hello);
    const queues = this.queues.appendReport(hello);
    const ejections = this.health.appendReport(hello, nowMs);
    if (inflight || prefixes || queues || ejections) grpcSend(token, hello.finish(), false);
  }

  /**
   * A message on the stream, if it is a fan-out (peer_inflight,
   * peer_prefix_records or the replicas' numbering, and no version): applied
   * and published. Malformed: the caller drops the stream (a new one starts
   * whole).
   */
  receive(ptr: usize, len: i32, version: u64, nowMs: u64): FanOut {
    const r = ProtoReader.over(ptr, len);
    let peerPtr: usize = 0;
    let peerLen: i32 = 0;
    let prefixPtr: usize = 0;
    let prefixLen: i32 = 0;
    let fanOut = false;
    let index: u64 = 0;
    let count: u64 = 0;
    let queuesPtr: usize = 0;
    let queuesLen: i32 = -1;
    let ejectionsPtr: usize = 0;
    let ejectionsLen: i32 = -1;
    while (r.more()) {
      const tag = <u32>r.varint();
      const field = tag >> 3;
      const wire = tag & 7;
      if (field == SNAPSHOT_VERSION) return FanOut.No;
      if (field == SNAPSHOT_PEER_INFLIGHT && wire == 2) {
        const sub = r.message();
        peerPtr = sub.start;
        peerLen = <i32>(sub.end - sub.start);
        fanOut = true;
      } else if (field == SNAPSHOT_PEER_PREFIX_RECORDS && wire == 2) {
        const sub = r.message();
        prefixPtr = sub.start;
        prefixLen = <i32>(sub.end - sub.start);
        fanOut = true;
      } else if (field == SNAPSHOT_PEER_EJECTIONS && wire == 2) {
        const sub = r.message();
        ejectionsPtr = sub.start;
        ejectionsLen = <i32>(sub.end - sub.start);
        fanOut = true;
      } else if (field == SNAPSHOT_PEER_QUEUES && wire == 2) {
        const sub = r.message();
        queuesPtr = sub.start;
        queuesLen = <i32>(sub.end - sub.start);
        fanOut = true;
      } else if ((field == SNAPSHOT_REPLICA_INDEX || field == SNAPSHOT_REPLICA_COUNT) && wire == 0) {
        if (field == SNAPSHOT_REPLICA_INDEX) index = r.varint();
        else count = r.varint();
        fanOut = true;
      } else {
        r.skip(wire);
      }
    }
    if (!r.ok) return FanOut.Malformed;
    if (!fanOut) return FanOut.No;
    if (peerLen > 0 && !this.peers.apply(peerPtr, peerLen)) return FanOut.Malformed;
    if (prefixLen > 0 && !this.prefixes.apply(prefixPtr, prefixLen)) return FanOut.Malformed;
    if (queuesLen >= 0 && !this.queues.receive(queuesPtr, queuesLen, nowMs)) return FanOut.Malformed;
    if (ejectionsLen >= 0 && !this.health.receive(ejectionsPtr, ejectionsLen, nowMs)) return FanOut.Malformed;
    // Every fan-out numbers the replicas afresh; nonsense numbering leaves this Envoy alone.
    const valid = count > 1 && index < count && count <= <u64>u32.MAX_VALUE;
    this.replicaIndex = valid ? <u32>index : 0;
    this.replicaCount = valid ? <u32>count : 0;
    this.publishPeers(version, nowMs);
    return FanOut.Applied;
  }

  /** Appends the changed entries as Hello.inflight; false when none changed. */
  private appendReport(hello: ProtoWriter): bool {
    if (getSharedData(INFLIGHT_KEY, this.bytes)) {
      if (!this.own.decode(this.bytes.ptr, this.bytes.len)) this.own.clear();
      this.bytes.release();
    } else {
      this.own.clear();
    }
    const entries = new ProtoWriter();
    if (this.reports.encode(this.own, entries) == 0) return false;
    hello.bytesField(HELLO_INFLIGHT, entries.finish());
    return true;
  }

  /** The peers' table for the workers, then the cell that tells them (`version`, `heardMs`: the cell's other figures as they stand). */
  private publishPeers(version: u64, heardMs: u64): void {
    const sum = this.peers.sum;
    const len = sum.encodedLength();
    if (this.out.byteLength < len) this.out = new ArrayBuffer(len * 2);
    sum.encodeInto(changetype<usize>(this.out));
    setSharedData(PEERS_KEY, changetype<usize>(this.out), len, 0);
    publishPeersChanged(version, heardMs, this.replicaIndex, this.replicaCount);
  }
}
