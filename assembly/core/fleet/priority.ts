// Flow-control classes. A request asks for one with a header; otherwise its
// model's default applies. Critical is admitted longest, Sheddable refused
// first (core/scheduling/admission.ts). Asking for a lower class is always allowed;
// Critical only for clients the gateway's config trusts, whether they ask for
// it or their model's default is Critical: the claim gate is the one place
// that grants it, and anyone else is served at Standard. The classes' numbers
// are the contract's (proto/contract.json), which the aggregator sends too.
import { Priority } from "../wire/contract.generated";

export { Priority };

/** No class asked for. */
export const NO_PRIORITY: i32 = -1;
/** The header's value is not a class name. */
export const BAD_PRIORITY: i32 = -2;

export const PRIORITY_COUNT = 3;

export function priorityName(p: Priority): string {
  if (p == Priority.Critical) return "critical";
  if (p == Priority.Sheddable) return "sheddable";
  return "standard";
}

/** A header value (ASCII, any case) as a Priority, or BAD_PRIORITY. */
export function parsePriority(ptr: usize, len: i32): i32 {
  if (asciiEqualsLower(ptr, len, "critical")) return Priority.Critical;
  if (asciiEqualsLower(ptr, len, "standard")) return Priority.Standard;
  if (asciiEqualsLower(ptr, len, "sheddable")) return Priority.Sheddable;
  return BAD_PRIORITY;
}

/**
 * The class a request is served at: what it asked for (or the model's
 * default), Critical only when the client may claim it (else the model's
 * default, and Standard if that is Critical).
 */
export function effectivePriority(asked: i32, modelDefault: Priority, mayClaimCritical: bool): Priority {
  const p = asked < 0 || (asked == Priority.Critical && !mayClaimCritical) ? modelDefault : <Priority>asked;
  return p == Priority.Critical && !mayClaimCritical ? Priority.Standard : p;
}

function asciiEqualsLower(ptr: usize, len: i32, lower: string): bool {
  if (len != lower.length) return false;
  for (let i = 0; i < len; i++) {
    if ((<i32>load<u8>(ptr + <usize>i) | 0x20) != lower.charCodeAt(i)) return false;
  }
  return true;
}

