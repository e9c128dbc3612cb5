// The end of a routed request, decided alike by the filter and the native
// build: its count in flight released, its pool's drain rate fed when a pod
// answered, and the pod to blame (core/fleet/outcome.ts) written to the
// passive-health ledger, or a failing pod's success. Each build keeps the
// shared tables its own way (gateway/shared-*.ts in Envoy, plain tables in
// the native build): they come in as a Ledgers.
import { Outcome } from "./fleet/outcome";
import { PoolLoad } from "./fleet/pool-load";

/** The shared state a request's end changes. */
export abstract class Ledgers {
  /**
   * The request no longer counts in flight on the pod with address hash
   * `hash`, nor its `prefillTokens` as prefill if it never got past it.
   */
  abstract release(hash: u64, prefillTokens: i32): void;
  /** `eject`: at once (Envoy moved the request off the pod), not after the ledger's threshold. */
  abstract recordFailure(address: string, nowMs: u64, eject: bool): void;
  /** The pod at `address` said it is full (core/fleet/outcome.ts): it is backed off for a moment. */
  abstract recordSaturated(address: string, nowMs: u64): void;
  /** Clears a pod's failures; called only for a pod that has some. */
  abstract recordSuccess(address: string): void;
  abstract hasFailures(address: string): bool;
}

/** Marks a request that ended with no response at all (the client went away first): nothing is learned. */
export const NO_RESPONSE: i64 = -1;

export class RequestEnd {
  private outcome: Outcome = new Outcome();
  /** Failures the last end() recorded (0-2). */
  failures: i32 = 0;
  /** The last end() backed off a saturated pod. */
  saturated: bool = false;
  /** The last end() changed the ledger: the caller re-applies it to the endpoints it routes on. */
  healthChanged: bool = false;

  /**
   * A request routed first to `primary` (address and its hash) ended with
   * response code `status` (NO_RESPONSE if none) and Envoy's response `flags`.
   * `served`: the pod that answered when Envoy moved the request to another
   * one, else null; `answered`: some pod answered (not Envoy itself, e.g. a
   * route's rate limit); `stream`, `sawDone`: the answer was an event stream,
   * and it ended with its terminal event; `prefillTokens`: what it still
   * counted as prefill (it had no first bytes).
   */
  end(
    primary: string, primaryHash: u64, served: string | null, answered: bool, status: i64, flags: u64, stream: bool, sawDone: bool,
    prefillTokens: i32, load: PoolLoad | null, nowMs: u64, ledgers: Ledgers,
  ): void {
    this.failures = 0;
    this.saturated = false;
    this.healthChanged = false;
    // However the request ended, it is no longer in flight.
    ledgers.release(primaryHash, prefillTokens);
    if (status == NO_RESPONSE) return;
    if (answered && load != null) load.completed(nowMs);
    const o = this.outcome;
    o.judge(served != null, status, flags, stream, sawDone);
    if (o.primaryFailed) {
      ledgers.recordFailure(primary, nowMs, o.primaryMovedOff);
      this.failures++;
    }
    if (o.servedFailed) {
      ledgers.recordFailure(served!, nowMs, false);
      this.failures++;
    }
    if (o.saturated) {
      ledgers.recordSaturated(served != null ? served : primary, nowMs);
      this.saturated = true;
      this.healthChanged = true;
    }
    if (o.primarySucceeded && ledgers.hasFailures(primary)) {
      ledgers.recordSuccess(primary);
      this.healthChanged = true;
    }
    if (this.failures > 0) this.healthChanged = true;
  }
}
