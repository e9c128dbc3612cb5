// Snapshots cross from the singleton link (main thread) to the filter on every
// worker through proxy-wasm shared data, which is process-wide per vm_id. The
// snapshot bytes are written first and a small 16-byte cell last: the version
// and when the aggregator was last heard from (a snapshot or a heartbeat, on
// Envoy's clock). A worker polls only the cell and copies the snapshot when
// its version changed.
import { getSharedData, HostBytes, setSharedData, utf8 } from "../abi/hostcalls";
import { decodeSnapshot, Snapshot } from "../core/snapshot";

const SNAPSHOT_KEY = utf8("llm_gateway.snapshot");
const CELL_KEY = utf8("llm_gateway.snapshot_cell");
const cell = new ArrayBuffer(16);

/** Shared data with cas 0 always overwrites; there is one writer, so no CAS loop. */
function writeCell(version: u64, heardMs: u64): void {
  store<u64>(changetype<usize>(cell), version);
  store<u64>(changetype<usize>(cell) + 8, heardMs);
  setSharedData(CELL_KEY, changetype<usize>(cell), 16, 0);
}

export function publishSnapshot(ptr: usize, len: i32, version: u64, nowMs: u64): void {
  setSharedData(SNAPSHOT_KEY, ptr, len, 0);
  writeCell(version, nowMs);
}

/** The aggregator is alive and has nothing new: only the heard-from time moves. */
export function publishHeartbeat(version: u64, nowMs: u64): void {
  writeCell(version, nowMs);
}

/** A worker's decoded copy of the latest published snapshot. */
export class SnapshotCache {
  current: Snapshot | null = null;
  /** When the link last heard from the aggregator; 0 = never. */
  heardMs: u64 = 0;
  private seenVersion: u64 = 0;
  private bytes: HostBytes = new HostBytes();

  /** Returns true when a newer snapshot was loaded. */
  refresh(): bool {
    const bytes = this.bytes;
    if (!getSharedData(CELL_KEY, bytes) || bytes.len != 16) {
      bytes.release();
      return false;
    }
    const version = load<u64>(bytes.ptr);
    this.heardMs = load<u64>(bytes.ptr + 8);
    bytes.release();
    if (version == this.seenVersion && this.current != null) return false;
    if (!getSharedData(SNAPSHOT_KEY, bytes)) return false;
    const snap = decodeSnapshot(bytes.ptr, bytes.len);
    bytes.release();
    if (snap == null) return false;
    this.current = snap;
    this.seenVersion = version;
    return true;
  }
}
