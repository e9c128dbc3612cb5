// What a config edit changes, as a reload sees it: the fields that cannot
// change in a running gateway (each named, with why), and a short account of
// the rest for the log.
import type { GatewayConfig, PoolConfig } from "../config.js";

/** Top-level sections read once, at start, by Envoy's bootstrap or by the processes themselves. */
const FIXED_SECTIONS: Record<"gateway" | "traffic" | "aggregator", string> = {
  gateway: "is part of Envoy's bootstrap (listener, filter settings); restart Envoy to change it",
  traffic: "is part of the Wasm filter's settings in Envoy's bootstrap; restart Envoy to change it",
  aggregator: "is read once when the aggregator starts; restart it to change it",
};

/** Leaf paths where two JSON-like values differ, e.g. `gateway.staleView.maxAgeMs`. */
function differingPaths(a: unknown, b: unknown, path: string): string[] {
  if (Object.is(a, b)) return [];
  const isObject = (v: unknown) => v !== null && typeof v === "object";
  if (!isObject(a) || !isObject(b) || Array.isArray(a) !== Array.isArray(b)) return [path];
  if (Array.isArray(a)) return JSON.stringify(a) === JSON.stringify(b) ? [] : [path];
  const keys = new Set([...Object.keys(a as object), ...Object.keys(b as object)]);
  return [...keys].flatMap((k) => differingPaths((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k], `${path}.${k}`));
}

/** One `field: why` line per field the edit changes that a running gateway cannot take. */
export function fixedFieldChanges(current: GatewayConfig, next: GatewayConfig): string[] {
  return (Object.keys(FIXED_SECTIONS) as Array<keyof typeof FIXED_SECTIONS>).flatMap((section) =>
    differingPaths(current[section], next[section], section).map((path) => `${path}: ${FIXED_SECTIONS[section]}`),
  );
}

/** The fields of a pool that differ, by name (the weights it overrides count as its weights). */
function poolFieldChanges(a: PoolConfig, b: PoolConfig): string[] {
  const keys = new Set([...Object.keys(a), ...Object.keys(b)] as Array<keyof PoolConfig>);
  keys.delete("name");
  const named = [...keys].filter((k) => JSON.stringify(a[k]) !== JSON.stringify(b[k])).map((k) => (k === "weightOverrides" ? "weights" : k));
  return [...new Set(named)];
}

/** What the edit changes that a reload applies, e.g. `pool mistral added`, `pool llama: weights, adapters`; empty only when nothing differs. */
export function describeChanges(current: GatewayConfig, next: GatewayConfig): string[] {
  const out: string[] = [];
  const before = new Map(current.pools.map((p) => [p.name, p]));
  const after = new Map(next.pools.map((p) => [p.name, p]));
  for (const name of after.keys()) if (!before.has(name)) out.push(`pool ${name} added`);
  for (const name of before.keys()) if (!after.has(name)) out.push(`pool ${name} removed`);
  for (const [name, pool] of after) {
    const old = before.get(name);
    if (!old) continue;
    const fields = poolFieldChanges(old, pool);
    if (fields.length > 0) out.push(`pool ${name}: ${fields.join(", ")}`);
  }
  const profiles = differingPaths(current.profiles, next.profiles, "profiles");
  if (profiles.length > 0) out.push(`${[...new Set(profiles.map((p) => p.split(".").slice(0, 2).join(".")))].join(", ")}`);
  if (JSON.stringify(current.models) !== JSON.stringify(next.models)) out.push("models");
  // Whatever else differs (the pools' order, say) still makes a change.
  if (out.length === 0 && JSON.stringify(current) !== JSON.stringify(next)) out.push("the order of pools or other details");
  return out;
}
