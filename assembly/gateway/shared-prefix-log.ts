// Moves prefix decisions between workers through the shared log
// (core/prefix/prefix-log.ts): on each refresh tick a worker replays the records
// other workers appended since its last visit and appends its own, with one
// read and, when it has something to add, one compare-and-swap write. Records
// carry the writer's worker id (gateway/worker-id.ts), so a worker can tell
// its own from the others'.
import { utf8 } from "../abi/hostcalls";
import { PrefixDecision } from "../core/prefix/prefix-index";
import { appendRecords, LOG_BYTES, PrefixLogReader } from "../core/prefix/prefix-log";
import { Router } from "../core/scheduling/router";
import { SharedValue } from "./shared-value";

const CAS_ATTEMPTS = 4;

export class SharedPrefixLog {
  private reader: PrefixLogReader = new PrefixLogReader();
  /** This worker's id. */
  writer: u32 = 0;
  private scratch: PrefixDecision = new PrefixDecision();
  private value: SharedValue = new SharedValue(utf8("llm_gateway.prefix_log"));
  private buffer: ArrayBuffer = new ArrayBuffer(LOG_BYTES);

  /** Replays the others' decisions into the router's index and shares its own. */
  sync(router: Router): void {
    const n = router.pendingCount;
    for (let attempt = 0; attempt < CAS_ATTEMPTS; attempt++) {
      const v = this.value;
      const bytes = v.bytes;
      let len = 0;
      if (v.read()) {
        len = bytes.len;
        this.reader.replay(bytes.ptr, len, this.writer, router.prefixes, this.scratch);
        if (n > 0 && len == LOG_BYTES) memory.copy(changetype<usize>(this.buffer), bytes.ptr, <usize>LOG_BYTES);
        bytes.release();
      }
      if (n == 0) return;
      const ptr = changetype<usize>(this.buffer);
      appendRecords(ptr, len == LOG_BYTES ? LOG_BYTES : 0, router.pendingDecisions, n, this.writer);
      if (v.write(ptr, LOG_BYTES)) {
        router.drainPending();
        return;
      }
    }
    // Still contended: these decisions stay local; the next tick shares newer ones.
    router.drainPending();
  }
}
