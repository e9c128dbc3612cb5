// Proxy-wasm shared data with Envoy's semantics (proxy-wasm-cpp-host
// src/shared_data.cc): one process-wide store, partitioned by vm_id, so every
// VM with the same vm_id (each Envoy worker runs its own) sees the same keys.
// Each value carries a CAS stamp drawn from a single process-wide counter that
// starts at 1 and never yields 0; every successful write takes a new stamp.
import { Status } from "./abi.js";

export interface SharedValue {
  value: Uint8Array;
  cas: number;
}

export class SharedData {
  private readonly byVm = new Map<string, Map<string, SharedValue>>();
  private nextStamp = 1;

  /** The value and its CAS, or undefined (the host then answers NOT_FOUND). */
  get(vmId: string, key: string): SharedValue | undefined {
    return this.byVm.get(vmId)?.get(key);
  }

  /** CAS 0 always writes; any other CAS must equal the key's current one. A new key ignores the CAS. */
  set(vmId: string, key: string, value: Uint8Array, cas: number): number {
    let map = this.byVm.get(vmId);
    if (!map) {
      map = new Map();
      this.byVm.set(vmId, map);
    }
    const current = map.get(key);
    if (current && cas !== 0 && cas !== current.cas) return Status.CasMismatch;
    map.set(key, { value: value.slice(), cas: this.stamp() });
    return Status.Ok;
  }

  private stamp(): number {
    const s = this.nextStamp;
    this.nextStamp = (this.nextStamp + 1) >>> 0 || 1;
    return s;
  }
}
