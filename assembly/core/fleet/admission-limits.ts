// A profile's admission limits as the snapshot carries them, and the class
// ladder they form (core/scheduling/admission.ts applies them to a pool's pods).
import { Priority } from "./priority";

/** No request is held longer than an hour. */
export const MAX_WAIT_BUDGET_MS: u32 = 3_600_000;

export class Admission {
  enabled: bool = false;
  /** A Standard request's queue limit per pod (at full relative speed). */
  maxWaiting: f64 = 4;
  /** KV usage at which a pod that already queues is saturated (Sheddable and Standard). */
  maxKvCache: f64 = 0.95;
  sheddableFactor: f64 = 0.5;
  criticalFactor: f64 = 2;
  maxRetryAfterS: u32 = 60;
  /**
   * How long the gateway may hold a request of each class (by Priority
   * value) while its pool has no room; 0 refuses at once instead.
   */
  readonly waitBudgetMs: StaticArray<u32> = [30_000, 60_000, 10_000];

  valid(): bool {
    return this.maxWaiting > 0 && this.maxWaiting <= 1e6 &&
      this.maxKvCache > 0 && this.maxKvCache <= 1 &&
      this.sheddableFactor > 0 && this.sheddableFactor <= 1 &&
      this.criticalFactor >= 1 && this.criticalFactor <= 1e3 &&
      this.maxRetryAfterS >= 1 && this.maxRetryAfterS <= 86_400 &&
      this.waitBudgetMs[0] <= MAX_WAIT_BUDGET_MS && this.waitBudgetMs[1] <= MAX_WAIT_BUDGET_MS &&
      this.waitBudgetMs[2] <= MAX_WAIT_BUDGET_MS;
  }

  /** A class's wait budget in ms, or the client's tighter one (`askedMs` >= 0). */
  waitBudget(p: Priority, askedMs: i64): u64 {
    const budget = <u64>unchecked(this.waitBudgetMs[<i32>p]);
    return askedMs >= 0 && <u64>askedMs < budget ? <u64>askedMs : budget;
  }

  queueLimit(p: Priority): f64 {
    if (p == Priority.Sheddable) return this.maxWaiting * this.sheddableFactor;
    if (p == Priority.Critical) return this.maxWaiting * this.criticalFactor;
    return this.maxWaiting;
  }

  /**
   * A retry's limit: halfway to the next class's (a Critical retry's is
   * Critical's). Strictly below Critical's whenever criticalFactor > 1, so a
   * Critical request is never refused while a retry of a lower class gets in.
   */
  retryLimit(p: Priority): f64 {
    if (p == Priority.Critical) return this.queueLimit(p);
    const next = p == Priority.Sheddable ? Priority.Standard : Priority.Critical;
    return (this.queueLimit(p) + this.queueLimit(next)) / 2;
  }
}
