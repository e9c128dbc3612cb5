// Every policy the benchmark compares, in report order.
import { leastRequest, random, roundRobin } from "./envoy.js";
import { oracle } from "./oracle.js";
import { ours } from "./ours.js";
import { PROFILES } from "./profiles.js";
import { reference } from "./reference.js";
import type { PolicySpec } from "./types.js";

export type { Decision, Policy, PolicyEnv, PolicySpec, RouteRequest } from "./types.js";

/** The baseline every ratio is taken against. */
export const BASELINE = roundRobin.name;

/** Ours with admission on (the config's default) and, for the comparison, off. */
const OURS = PROFILES.flatMap((p) => [ours(p), ours(p, { admission: false })]);

export const POLICIES: readonly PolicySpec[] = [roundRobin, random, leastRequest, ...OURS, reference, oracle];

/** The named policies, in report order; throws naming the unknown ones. */
export function selectPolicies(names?: readonly string[]): PolicySpec[] {
  if (!names || names.length === 0) return [...POLICIES];
  const unknown = names.filter((n) => !POLICIES.some((p) => p.name === n));
  if (unknown.length > 0) throw new Error(`unknown polic${unknown.length > 1 ? "ies" : "y"} ${unknown.join(", ")} (known: ${POLICIES.map((p) => p.name).join(", ")})`);
  return POLICIES.filter((p) => names.includes(p.name));
}
