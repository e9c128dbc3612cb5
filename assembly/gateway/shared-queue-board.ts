// The queue board (core/queueing/queue-board.ts) in one shared-data key:
// every worker's summary of what it holds, read on each tick and, while
// something is held anywhere, per request; written by a worker when its own
// queues change, with compare-and-swap (on a collision it re-reads and
// rewrites only its own summaries).
import { utf8 } from "../abi/hostcalls";
import { Router } from "../core/scheduling/router";
import { SharedValue } from "./shared-value";

const CAS_ATTEMPTS = 8;
export const QUEUES_KEY: ArrayBuffer = utf8("llm_gateway.queues");

export class SharedQueueBoard {
  private value: SharedValue = new SharedValue(QUEUES_KEY);
  private out: ArrayBuffer = new ArrayBuffer(256);

  /** Loads the shared board into the router's (empty if absent or unreadable). */
  read(router: Router): void {
    const v = this.value;
    if (!v.read()) {
      router.board.clear();
      return;
    }
    router.board.decode(v.bytes.ptr, v.bytes.len);
    v.bytes.release();
  }

  /** Publishes this worker's summaries, re-reading the others' whenever another worker wrote first. */
  commit(router: Router, nowMs: u64): void {
    for (let i = 0; i < CAS_ATTEMPTS; i++) {
      router.publish(router.board, nowMs);
      const len = router.board.encodedLength();
      if (this.out.byteLength < len) this.out = new ArrayBuffer(len * 2);
      const ptr = changetype<usize>(this.out);
      router.board.encodeInto(ptr);
      if (this.value.write(ptr, len)) return;
      this.read(router);
    }
  }
}
