// Decisions in words, for the debug response header: which pod, which
// fallbacks, and each scorer's weighted share of their totals; or why a
// request was refused and how its Retry-After came about. Built only when a
// request asks for it (and may), never on the ordinary path. Names in it come
// from the snapshot (validated config names, addresses), so it is plain ASCII.
import { Picker } from "./picker";
import { Priority, priorityName } from "../fleet/priority";
import { ModelRoute, Pool } from "../fleet/snapshot";

export function explainPick(picker: Picker, requested: ModelRoute, target: ModelRoute, priority: Priority, retried: bool): string {
  const ranked = picker.ranked;
  let out = "pod=" + ranked[0].address + "; fallbacks=";
  for (let k = 1; k < ranked.length; k++) out += (k > 1 ? "," : "") + ranked[k].address;
  out += "; " + modelPart(requested, target) + "; class=" + priorityName(priority) + (retried ? "; retry=admitted" : "") +
    "; profile=" + target.profile.name + "; scores=";
  const scorers = picker.scorers;
  for (let k = 0; k < ranked.length; k++) {
    out += (k > 0 ? " " : "") + ranked[k].address + "(";
    for (let s = 0; s < scorers.length; s++) out += scorers[s].name + "=" + fixed2(picker.contribution(k, s)) + ",";
    out += "total=" + fixed2(picker.rankedTotal(k)) + ")";
  }
  return out;
}

export function explainRefusal(pool: Pool, target: ModelRoute, priority: Priority, booked: i32, drainPerS: f64, retryAfterS: u32): string {
  return "refused=pool_saturated; pool=" + pool.name + "; model=" + target.name + "; class=" + priorityName(priority) +
    "; profile=" + target.profile.name + "; booked_retries=" + booked.toString() + "; drain_per_s=" + fixed2(drainPerS) +
    "; retry_after_s=" + retryAfterS.toString();
}

export function explainQueueRefusal(
  pool: Pool, target: ModelRoute, priority: Priority, full: bool, ahead: i32, waitMs: f64, budgetMs: u64, retryAfterS: u32,
): string {
  return "refused=" + (full ? "queue_full" : "wait_over_budget") + "; pool=" + pool.name + "; model=" + target.name +
    "; class=" + priorityName(priority) + "; profile=" + target.profile.name + "; held_ahead=" + ahead.toString() +
    "; predicted_wait_ms=" + (<i64>Math.round(waitMs)).toString() + "; budget_ms=" + budgetMs.toString() +
    "; retry_after_s=" + retryAfterS.toString();
}

function modelPart(requested: ModelRoute, target: ModelRoute): string {
  return requested == target ? "model=" + target.name : "model=" + requested.name + "->" + target.name;
}

/** Two decimals without float-printing noise. */
function fixed2(v: f64): string {
  const cents = <i64>Math.round(v * 100);
  const sign = cents < 0 ? "-" : "";
  const abs = cents < 0 ? -cents : cents;
  const frac = abs % 100;
  return sign + (abs / 100).toString() + "." + (frac < 10 ? "0" : "") + frac.toString();
}
