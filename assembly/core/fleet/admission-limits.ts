// A profile's admission limits as the snapshot carries them, and the class
// ladder they form (core/scheduling/admission.ts applies them to a pool's pods).
import { Priority } from "./priority";

export class Admission {
  enabled: bool = false;
  /** A Standard request's queue limit per pod (at full relative speed). */
  maxWaiting: f64 = 4;
  /** KV usage at which a pod that already queues is saturated (Sheddable and Standard). */
  maxKvCache: f64 = 0.95;
  sheddableFactor: f64 = 0.5;
  criticalFactor: f64 = 2;
  maxRetryAfterS: u32 = 60;

  valid(): bool {
    return this.maxWaiting > 0 && this.maxWaiting <= 1e6 &&
      this.maxKvCache > 0 && this.maxKvCache <= 1 &&
      this.sheddableFactor > 0 && this.sheddableFactor <= 1 &&
      this.criticalFactor >= 1 && this.criticalFactor <= 1e3 &&
      this.maxRetryAfterS >= 1 && this.maxRetryAfterS <= 86_400;
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
