// This worker's routing decisions for the prefix index: each is applied to
// the index at once and kept until the shared log takes it for the other
// workers (gateway/shared-prefix-log.ts, or the native build's caller).
import { PrefixDecision, PrefixIndex } from "./prefix-index";

/** At most this many decisions wait for the next refresh tick to be shared. */
const MAX_PENDING: i32 = 256;

export class DecisionLog {
  /** Decisions not yet shared: `pending[0..count)`. */
  readonly pending: PrefixDecision[] = [];
  count: i32 = 0;

  constructor(readonly index: PrefixIndex) {}

  /** A reusable record to fill and pass to record(); the oldest unshared ones are overwritten if nobody drains them. */
  next(): PrefixDecision {
    const list = this.pending;
    if (this.count == MAX_PENDING) this.count = 0;
    if (this.count == list.length) list.push(new PrefixDecision());
    return unchecked(list[this.count++]);
  }

  record(d: PrefixDecision): void {
    this.index.record(d);
  }

  /** Takes the decisions gathered since the last call; valid until the next decision. */
  drain(): i32 {
    const n = this.count;
    this.count = 0;
    return n;
  }
}
