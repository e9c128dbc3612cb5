// Snapshots cross from the singleton link (main thread) to the filter on every
// worker through proxy-wasm shared data, which is process-wide per vm_id. The
// snapshot bytes are written first and a small 32-byte cell last: the version,
// when the aggregator was last heard from (a snapshot, a heartbeat or a
// fan-out of the peers' in flight, on Envoy's clock), how many times the
// peers' in flight was published (gateway/peer-share.ts), and this Envoy's
// place among the replicas (u32 index, u32 count; count 0: alone). A worker polls only
// the cell and copies the snapshot (or the peers' table) when its number
// changed; what to do with a snapshot is the core's FleetView.
import { getSharedData, HostBytes, setSharedData, utf8 } from "../abi/hostcalls";
import { FleetView } from "../core/scheduling/fleet-view";
import { HealthLedger } from "../core/fleet/health";
import { InflightTable } from "../core/fleet/inflight";
import { PrefixIndex } from "../core/prefix/prefix-index";
import { decodeSnapshot } from "../core/wire/snapshot-decode";

const SNAPSHOT_KEY = utf8("llm_gateway.snapshot");
const CELL_KEY = utf8("llm_gateway.snapshot_cell");
const CELL_BYTES = 32;
const cell = new ArrayBuffer(CELL_BYTES);
/** The link's count of peers' tables published (it is the cell's one writer). */
let peersPublished: u64 = 0;
let replicaIndex: u32 = 0;
let replicaCount: u32 = 0;

/** Shared data with cas 0 always overwrites; there is one writer, so no CAS loop. */
function writeCell(version: u64, heardMs: u64): void {
  store<u64>(changetype<usize>(cell), version);
  store<u64>(changetype<usize>(cell) + 8, heardMs);
  store<u64>(changetype<usize>(cell) + 16, peersPublished);
  store<u32>(changetype<usize>(cell) + 24, replicaIndex);
  store<u32>(changetype<usize>(cell) + 28, replicaCount);
  setSharedData(CELL_KEY, changetype<usize>(cell), CELL_BYTES, 0);
}

/** The link published a new peers' table (after writing its key) and place; a fan-out also shows the aggregator alive. */
export function publishPeersChanged(version: u64, nowMs: u64, index: u32, count: u32): void {
  peersPublished++;
  replicaIndex = index;
  replicaCount = count;
  writeCell(version, nowMs);
}

export function publishSnapshot(ptr: usize, len: i32, version: u64, nowMs: u64): void {
  setSharedData(SNAPSHOT_KEY, ptr, len, 0);
  writeCell(version, nowMs);
}

/** The aggregator is alive and has nothing new: only the heard-from time moves. */
export function publishHeartbeat(version: u64, nowMs: u64): void {
  writeCell(version, nowMs);
}

/** Reads the published cell into a worker's FleetView, and the snapshot when it is new. */
export class SnapshotReader {
  private bytes: HostBytes = new HostBytes();
  private pendingVersion: u64 = 0;
  /** The cell's count of peers' tables published, as polled last. */
  peersPublished: u64 = 0;
  /** This Envoy's place among the replicas, as the cell had it when polled last (count 0: alone). */
  replicaIndex: u32 = 0;
  replicaCount: u32 = 0;

  /** True when the view should install a snapshot: call load() then. */
  poll(view: FleetView): bool {
    const bytes = this.bytes;
    if (!getSharedData(CELL_KEY, bytes) || bytes.len != CELL_BYTES) {
      bytes.release();
      return false;
    }
    this.pendingVersion = load<u64>(bytes.ptr);
    const heardMs = load<u64>(bytes.ptr + 8);
    this.peersPublished = load<u64>(bytes.ptr + 16);
    this.replicaIndex = load<u32>(bytes.ptr + 24);
    this.replicaCount = load<u32>(bytes.ptr + 28);
    bytes.release();
    return view.offer(this.pendingVersion, heardMs);
  }

  /** Installs the published snapshot; false if it is missing or does not decode (the old one stays). */
  load(view: FleetView, inflight: InflightTable, health: HealthLedger, prefixes: PrefixIndex): bool {
    const bytes = this.bytes;
    if (!getSharedData(SNAPSHOT_KEY, bytes)) return false;
    const snap = decodeSnapshot(bytes.ptr, bytes.len);
    bytes.release();
    if (snap == null) return false;
    view.install(snap, this.pendingVersion, inflight, health, prefixes);
    return true;
  }
}
