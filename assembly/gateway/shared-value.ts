// One proxy-wasm shared-data key read and written with compare-and-swap: a
// read remembers the key's CAS, and a write against it fails when another
// worker wrote in between (the caller then reads again and re-applies its
// change). Every shared structure of the filter (in-flight table, health
// ledger, prefix log, worker counter) goes through this.
import { getSharedData, HostBytes, lastCas, setSharedData, Status } from "../abi/hostcalls";

export class SharedValue {
  /** The value read last; call bytes.release() once it has been decoded. */
  readonly bytes: HostBytes = new HostBytes();
  /** The CAS of the last read; 0 when the key was absent (a write then always lands). */
  cas: u32 = 0;

  constructor(private key: ArrayBuffer) {}

  /** Reads the key into `bytes`; false (and cas 0) when it is absent. */
  read(): bool {
    if (!getSharedData(this.key, this.bytes)) {
      this.cas = 0;
      return false;
    }
    this.cas = lastCas();
    return true;
  }

  /** Writes against the last read's CAS; false when another writer came first. */
  write(ptr: usize, len: i32): bool {
    return setSharedData(this.key, ptr, len, this.cas) != Status.CasMismatch;
  }
}
