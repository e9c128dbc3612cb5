// The memory of refused requests (core/fleet/refusals.ts) in one shared-data key, so
// a retry is recognised on whichever worker its connection lands. Read and
// written only for requests that find no room; each change is a
// read-modify-write with compare-and-swap, re-applied if another worker wrote
// in between.
import { utf8 } from "../abi/hostcalls";
import { RefusalLedger, RefusalMemory } from "../core/fleet/refusals";
import { SharedValue } from "./shared-value";

const CAS_ATTEMPTS = 8;

export class SharedRefusals extends RefusalLedger {
  private memory: RefusalMemory = new RefusalMemory();
  private value: SharedValue = new SharedValue(utf8("llm_gateway.refusals"));
  private out: ArrayBuffer = new ArrayBuffer(0);

  take(hash: u64, nowMs: u64): bool {
    for (let i = 0; i < CAS_ATTEMPTS; i++) {
      this.read();
      if (!this.memory.take(hash, nowMs)) return false;
      if (this.write()) return true;
    }
    return false;
  }

  remember(hash: u64, notBeforeMs: u64, expiryMs: u64, nowMs: u64): void {
    for (let i = 0; i < CAS_ATTEMPTS; i++) {
      this.read();
      this.memory.remember(hash, notBeforeMs, expiryMs, nowMs);
      if (this.write()) return;
    }
  }

  private read(): void {
    const v = this.value;
    if (!v.read()) {
      this.memory.clear();
      return;
    }
    // Bytes this code did not write are dropped: the next write replaces them.
    this.memory.decode(v.bytes.ptr, v.bytes.len);
    v.bytes.release();
  }

  private write(): bool {
    const len = this.memory.encodedLength();
    if (this.out.byteLength < len) this.out = new ArrayBuffer(len * 2);
    const ptr = changetype<usize>(this.out);
    this.memory.encodeInto(ptr);
    return this.value.write(ptr, len);
  }
}
