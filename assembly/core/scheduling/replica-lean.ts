// Envoy replicas learn what the others sent tens of milliseconds late (the
// control plane's round, the link's report, each worker's tick). Scoring the
// same snapshot alike, replicas deciding within that lag would all send to
// the moment's best pod, and its prefill queue grows by one per replica.
// So each leans toward a share of its own: replica k of R prefers, among
// pods that score within a small margin of each other, those whose slot is
// k mod R, then the rest in an order of its own (its worker's salt). The
// margin is small beside a real difference in load, so load still decides.
// Alone (no place, or R = 1) a pick is what it always was.
import { Endpoint } from "../fleet/snapshot";
import { mix64 } from "../wire/hash";

/**
 * The lean, as a share of the weights' sum: up to 1.5x this for an own pod,
 * 0.5x for another. Measured on the simulator's scenarios at 4 replicas:
 * 0.03 and 0.06 cut the p95 loss against one gateway about alike on most;
 * 0.06 more on uniform and heterogeneous fleets, a random order alone
 * (no own share) half as much.
 */
export const LEAN_SHARE: f64 = 0.06;

/** This gateway's place among the replicas that share through the control plane (the aggregator numbers them). */
export class ReplicaPlace {
  /** 0-based, below `count`. */
  index: u32 = 0;
  /** Replicas sharing, this one included; 0 or 1: alone. */
  count: u32 = 0;

  set(index: u32, count: u32): void {
    const valid = count > 1 && index < count;
    this.index = valid ? index : 0;
    this.count = valid ? count : 0;
  }

  get shared(): bool {
    return this.count > 1;
  }
}

const TO_UNIT: f64 = 1.0 / 18446744073709551616.0;

/** Adds the lean to `totals[i]` for the first `n` candidates, given the weights' sum. */
export function leanApart(candidates: Endpoint[], totals: StaticArray<f64>, n: i32, weightSum: f64, place: ReplicaPlace, salt: u64): void {
  const unit = LEAN_SHARE * weightSum;
  const count = place.count;
  const index = place.index;
  for (let i = 0; i < n; i++) {
    const e = unchecked(candidates[i]);
    const own: f64 = <u32>e.slot % count == index ? 1.0 : 0.0;
    const order = <f64>mix64(e.addressHash ^ salt) * TO_UNIT;
    unchecked(totals[i] += unit * (own + 0.5 * order));
  }
}
