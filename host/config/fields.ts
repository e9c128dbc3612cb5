// The config's small field schemas (ports, hosts, names, endpoints) and the
// host:port parsing they share with discovery and the Envoy renderer.
import { isIPv4, isIPv6 } from "node:net";
import * as z from "zod";
import { msg } from "../validation.js";
import { ENGINES, type HostPort } from "./types.js";

const HOSTNAME = /^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;

/** An IPv4/IPv6 literal (no brackets) or a syntactically valid DNS name. */
function isHostText(host: string): boolean {
  if (isIPv6(host)) return true;
  // All-numeric names would be taken for (bad) IPv4 literals by resolvers.
  return /^[\d.]+$/.test(host) ? isIPv4(host) : HOSTNAME.test(host);
}

/** Splits `host:port` / `[v6]:port`; returns null when the text is not one. */
export function parseEndpoint(text: string): HostPort | null {
  const m = /^(?:\[([^\]]+)\]|([^:\[\]]+)):(\d{1,5})$/.exec(text);
  if (!m) return null;
  const port = Number(m[3]);
  if (port < 1 || port > 65535) return null;
  if (m[1] !== undefined) return isIPv6(m[1]) ? { host: m[1], port } : null;
  const host = m[2];
  return isHostText(host) ? { host, port } : null;
}

/** Formats ip/port for an address string, bracketing IPv6. */
export function formatHostPort(host: string, port: number): string {
  return isIPv6(host) ? `[${host}]:${port}` : `${host}:${port}`;
}

export const port = (allowZero: boolean) => {
  const text = `expected an integer port ${allowZero ? 0 : 1}..65535`;
  return z.number({ error: msg(text) }).int({ error: text }).min(allowZero ? 0 : 1, { error: text }).max(65535, { error: text });
};
export const positiveInt = z.number({ error: msg("expected an integer > 0") }).int({ error: "expected an integer > 0" }).min(1, { error: "expected an integer > 0" });
export const SHARE_TEXT = "expected an integer 0..60000 (milliseconds; 0: no sharing between Envoy replicas)";
export const weight = z.number({ error: msg("expected a number >= 0") }).min(0, { error: "expected a number >= 0" });
export const HOST_TEXT = "expected a host name or IP address";
export const host = z.string({ error: msg(HOST_TEXT) }).refine(isHostText, { error: HOST_TEXT });
// Model and pool names travel in JSON bodies, headers and metric labels: keep them plain.
export const NAME_TEXT = "expected a non-empty name of letters, digits and . _ - : / (no spaces)";
export const PLAIN_NAME = /^[A-Za-z0-9][A-Za-z0-9._:\/-]{0,255}$/;
export const name = z.string({ error: msg(NAME_TEXT) }).regex(PLAIN_NAME, { error: NAME_TEXT });
export const engine = z.enum(ENGINES, { error: msg(`expected one of ${ENGINES.join(", ")}`) });
export const ENDPOINT_TEXT = "expected host:port (e.g. 127.0.0.1:8000, vllm-0:8000, [::1]:8000)";
export const endpoint = z.string({ error: msg(ENDPOINT_TEXT) }).refine((s) => parseEndpoint(s) !== null, { error: ENDPOINT_TEXT });
export const CAPACITY_TEXT = "expected a number > 0 (the pod's speed relative to the pool's others)";
export const ENDPOINT_ENTRY_TEXT = "expected host:port, or { address: host:port, capacity: number > 0 }";
/**
 * A field checked by a refinement rather than a typed schema: in a union, a
 * type error would drop the whole reading and blame the entry, not the field.
 */
export const refined = <T>(ok: (v: unknown) => boolean, text: string) =>
  z
    .unknown()
    .refine(ok, { error: (iss) => (iss.input === undefined ? "is required" : text) })
    .transform((v) => v as T);
/**
 * `host:port`, or `{ address, capacity }` to state a pod's relative speed
 * (e.g. 0.35 for an A10G beside H100s at 1). If any endpoint of a pool gives
 * a capacity, the pool uses configured values only, 1 where none is given,
 * never a learned one: learned rates (tokens/s) and configured ones do not mix.
 */
export const endpointEntry = z.union(
  [
    endpoint,
    z.strictObject({
      address: refined<string>((v) => typeof v === "string" && parseEndpoint(v) !== null, ENDPOINT_TEXT),
      capacity: refined<number>((v) => typeof v === "number" && Number.isFinite(v) && v > 0, CAPACITY_TEXT).optional(),
    }),
  ],
  { error: msg(ENDPOINT_ENTRY_TEXT) },
);
