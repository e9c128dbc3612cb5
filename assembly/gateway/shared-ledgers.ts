// The shared tables a request's end changes (core/lifecycle.ts), as the
// filter keeps them: in-flight counts and the health ledger in shared data.
import { Ledgers } from "../core/lifecycle";
import { SharedHealth } from "./shared-health";
import { SharedInflight } from "./shared-inflight";

export class SharedLedgers extends Ledgers {
  constructor(private inflight: SharedInflight, private health: SharedHealth) {
    super();
  }

  release(hash: u64, prefillTokens: i32): void {
    this.inflight.defer(hash, -1, prefillTokens > 0 ? -1 : 0, -prefillTokens);
  }

  recordFailure(address: string, nowMs: u64, eject: bool): void {
    this.health.recordFailure(address, nowMs, eject);
  }

  recordSaturated(address: string, nowMs: u64): void {
    this.health.recordSaturated(address, nowMs);
  }

  recordSuccess(address: string): void {
    this.health.recordSuccess(address);
  }

  hasFailures(address: string): bool {
    return this.health.ledger.hasFailures(address);
  }
}
