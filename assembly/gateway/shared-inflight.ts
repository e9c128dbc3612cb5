// The in-flight table (core/fleet/inflight.ts) in one shared-data key, so every
// worker counts every worker's requests. A decision reads it once, the router
// adds the request to it, and one compare-and-swap write publishes it; if
// another worker wrote in between, the table is re-read and only this
// request's change re-applied (the decision itself stands).
import { utf8 } from "../abi/hostcalls";
import { InflightTable } from "../core/fleet/inflight";
import { SharedValue } from "./shared-value";

// Workers rarely collide; a bounded loop keeps a pathological case cheap.
const CAS_ATTEMPTS = 8;

export class SharedInflight {
  readonly table: InflightTable = new InflightTable();
  private value: SharedValue = new SharedValue(utf8("llm_gateway.inflight"));
  private out: ArrayBuffer = new ArrayBuffer(256);

  /** Loads the shared table into `table` (empty if absent or unreadable). */
  read(): void {
    const v = this.value;
    if (!v.read()) {
      this.table.clear();
      return;
    }
    // Bytes this code did not write are dropped: the next write replaces them.
    this.table.decode(v.bytes.ptr, v.bytes.len);
    v.bytes.release();
  }

  /** Publishes `table` after the caller made this change (InflightTable.add) to what read() loaded. */
  commit(hash: u64, delta: i32, streams: i32 = 0, tokens: i32 = 0): void {
    for (let i = 0; i < CAS_ATTEMPTS; i++) {
      if (this.write()) return;
      this.read();
      this.table.add(hash, delta, streams, tokens);
    }
  }

  /** read(), add, commit: for a change made outside a decision (a stream's first bytes, or its end). */
  add(hash: u64, delta: i32, streams: i32 = 0, tokens: i32 = 0): void {
    this.read();
    this.table.add(hash, delta, streams, tokens);
    this.commit(hash, delta, streams, tokens);
  }

  private write(): bool {
    const len = this.table.encodedLength();
    if (this.out.byteLength < len) this.out = new ArrayBuffer(len * 2);
    const ptr = changetype<usize>(this.out);
    this.table.encodeInto(ptr);
    return this.value.write(ptr, len);
  }
}
