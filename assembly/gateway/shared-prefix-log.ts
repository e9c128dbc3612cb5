// Moves prefix decisions between workers through the shared log
// (core/prefix/prefix-log.ts): on each refresh tick a worker replays the records
// other workers appended since its last visit and appends its own, with one
// read and, when it has something to add, one compare-and-swap write. Records
// carry the writer's worker id (gateway/worker-id.ts), so a worker can tell
// its own from the others'. The link (gateway/peer-prefix.ts) appends the
// other Envoy replicas' records the same way, under a writer id of its own.
import { utf8 } from "../abi/hostcalls";
import { PrefixDecision, PrefixIndex } from "../core/prefix/prefix-index";
import { appendRecords, LOG_BYTES, PrefixLogReader } from "../core/prefix/prefix-log";
import { Router } from "../core/scheduling/router";
import { SharedValue } from "./shared-value";

const CAS_ATTEMPTS = 4;

/** The shared-data key of the log. */
export const PREFIX_LOG_KEY: ArrayBuffer = utf8("llm_gateway.prefix_log");

export class SharedPrefixLog {
  private reader: PrefixLogReader = new PrefixLogReader();
  /** This worker's id. */
  writer: u32 = 0;
  private scratch: PrefixDecision = new PrefixDecision();
  private value: SharedValue = new SharedValue(PREFIX_LOG_KEY);
  private buffer: ArrayBuffer = new ArrayBuffer(LOG_BYTES);

  /** Replays the others' decisions into the router's index and shares its own. */
  sync(router: Router): void {
    this.append(router.pendingDecisions, router.pendingCount, router.prefixes);
    router.drainPending();
  }

  /**
   * Replays the others' records into `index` (none: only appends) and
   * appends `pending[0..n)`, with one read and, when there is something to
   * add, one compare-and-swap write, retried a few times; false when still
   * contended (the records then stay local: newer ones follow).
   */
  append(pending: PrefixDecision[], n: i32, index: PrefixIndex | null): bool {
    for (let attempt = 0; attempt < CAS_ATTEMPTS; attempt++) {
      const v = this.value;
      const bytes = v.bytes;
      let len = 0;
      if (v.read()) {
        len = bytes.len;
        if (index != null) this.reader.replay(bytes.ptr, len, this.writer, index, this.scratch);
        if (n > 0 && len == LOG_BYTES) memory.copy(changetype<usize>(this.buffer), bytes.ptr, <usize>LOG_BYTES);
        bytes.release();
      }
      if (n == 0) return true;
      const ptr = changetype<usize>(this.buffer);
      appendRecords(ptr, len == LOG_BYTES ? LOG_BYTES : 0, pending, n, this.writer);
      if (v.write(ptr, LOG_BYTES)) return true;
    }
    return false;
  }
}
