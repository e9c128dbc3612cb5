// Where things are in the Envoy bootstrap template (envoy/gateway.yaml), and
// the checks every part of the renderer applies to what it writes there.
import { isSeq, type Document } from "yaml";

export const HCM = ["static_resources", "listeners", 0, "filter_chains", 0, "filters", 0, "typed_config"];
export const ROUTES = [...HCM, "route_config", "virtual_hosts", 0, "routes"];
const HCM_FILTERS = [...HCM, "http_filters"];

// As in the gateway config: the name goes into a header match and a cluster name.
export const POOL_NAME = /^[A-Za-z0-9][A-Za-z0-9._:\/-]{0,255}$/;

export function httpFilters(doc: Document): { items: unknown[] } {
  const filters = doc.getIn(HCM_FILTERS);
  if (!isSeq(filters)) throw new Error("the Envoy template has no http_filters list");
  return filters;
}

export function checkInt(name: string, value: number, min: number, max: number): number {
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new Error(`${name} must be an integer in [${min}, ${max}], got ${value}`);
  }
  return value;
}
