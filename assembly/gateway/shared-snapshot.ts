// Snapshots cross from the singleton link (main thread) to the filter on every
// worker through proxy-wasm shared data, which is process-wide per vm_id. The
// snapshot bytes are written first and a small version key last, so a worker
// polls only the 8-byte version and copies the snapshot when it changed.
import { getSharedData, HostBytes, setSharedData, utf8 } from "../abi/hostcalls";
import { decodeSnapshot, Snapshot } from "../core/snapshot";

const SNAPSHOT_KEY = utf8("llm_gateway.snapshot");
const VERSION_KEY = utf8("llm_gateway.snapshot_version");
const versionCell = new ArrayBuffer(8);

export function publishSnapshot(ptr: usize, len: i32, version: u64): void {
  // Shared data with cas 0 always overwrites; one writer, so no CAS loop needed.
  setSharedData(SNAPSHOT_KEY, ptr, len, 0);
  store<u64>(changetype<usize>(versionCell), version);
  setSharedData(VERSION_KEY, changetype<usize>(versionCell), 8, 0);
}

/** A worker's decoded copy of the latest published snapshot. */
export class SnapshotCache {
  current: Snapshot | null = null;
  private seenVersion: u64 = 0;
  private bytes: HostBytes = new HostBytes();

  /** Returns true when a newer snapshot was loaded. */
  refresh(): bool {
    const bytes = this.bytes;
    if (!getSharedData(VERSION_KEY, bytes) || bytes.len != 8) {
      bytes.release();
      return false;
    }
    const version = load<u64>(bytes.ptr);
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
