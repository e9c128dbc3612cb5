// Envoy without our filter, for comparisons: derived from the gateway's own
// rendered bootstrap so the listener, buffer limits and timeouts stay
// identical and only the routing differs. The Wasm service and filter go; each
// pool becomes a STATIC cluster with one of Envoy's own load balancers.
import { parse, stringify } from "yaml";

export type EnvoyLbPolicy = "ROUND_ROBIN" | "LEAST_REQUEST";

/** With several pools, requests carry this header naming theirs (as a client would pick a per-model Service). */
export const POOL_HEADER = "x-bench-pool";

const WASM_BOOTSTRAP_EXTENSION = "envoy.bootstrap.wasm";
const WASM_HTTP_FILTER = "envoy.filters.http.wasm";
const PODS_CLUSTER = "llm_gateway_pods";

interface Named {
  name: string;
  [key: string]: unknown;
}

interface Bootstrap {
  bootstrap_extensions?: Named[];
  static_resources: {
    listeners: Array<{ filter_chains: Array<{ filters: Array<{ typed_config?: HttpConnectionManager }> }> }>;
    clusters: Named[];
  };
}

interface HttpConnectionManager {
  http_filters?: Named[];
  route_config?: { virtual_hosts: Array<{ routes: Array<{ match: unknown; route: Record<string, unknown> }> }> };
}

function templateDrift(what: string): Error {
  return new Error(`baseline Envoy: the rendered gateway config no longer has ${what}; update bench/baseline-envoy.ts`);
}

export interface BaselinePool {
  name: string;
  /** "ip:port" each. */
  endpoints: string[];
}

export function baselineEnvoyConfig(gatewayYaml: string, pools: BaselinePool[], lbPolicy: EnvoyLbPolicy): string {
  const cfg = parse(gatewayYaml) as Bootstrap;

  const extensions = cfg.bootstrap_extensions ?? [];
  const keptExtensions = extensions.filter((e) => e.name !== WASM_BOOTSTRAP_EXTENSION);
  if (keptExtensions.length === extensions.length) throw templateDrift(`the ${WASM_BOOTSTRAP_EXTENSION} extension`);
  if (keptExtensions.length > 0) cfg.bootstrap_extensions = keptExtensions;
  else delete cfg.bootstrap_extensions;

  const hcms = cfg.static_resources.listeners.flatMap((l) => l.filter_chains.flatMap((c) => c.filters.map((f) => f.typed_config)));
  const hcm = hcms.find((h) => h?.http_filters?.some((f) => f.name === WASM_HTTP_FILTER));
  if (!hcm?.http_filters || !hcm.route_config) throw templateDrift(`the ${WASM_HTTP_FILTER} HTTP filter`);
  hcm.http_filters = hcm.http_filters.filter((f) => f.name !== WASM_HTTP_FILTER);

  const clusters = cfg.static_resources.clusters;
  const i = clusters.findIndex((c) => c.name === PODS_CLUSTER);
  if (i < 0) throw templateDrift(`the ${PODS_CLUSTER} cluster`);
  // Connect timeout and circuit breakers carry over; the ORIGINAL_DST-only fields do not.
  const { type: _type, lb_policy: _lb, original_dst_lb_config: _odst, cleanup_interval: _cleanup, name: _name, ...common } = clusters[i];
  const clusterName = (pool: BaselinePool) => (pools.length === 1 ? PODS_CLUSTER : `${PODS_CLUSTER}_${pool.name}`);
  clusters.splice(i, 1, ...pools.map((pool) => ({
    ...common,
    name: clusterName(pool),
    type: "STATIC",
    lb_policy: lbPolicy,
    load_assignment: {
      cluster_name: clusterName(pool),
      endpoints: [{ lb_endpoints: pool.endpoints.map((hostPort) => ({ endpoint: { address: socketAddress(hostPort) } })) }],
    },
  })));

  const host = hcm.route_config.virtual_hosts[0];
  const template = host.routes[0].route;
  host.routes = pools.map((pool) => ({
    match: pools.length === 1
      ? { prefix: "/" }
      : { prefix: "/", headers: [{ name: POOL_HEADER, string_match: { exact: pool.name } }] },
    route: { ...template, cluster: clusterName(pool) },
  }));
  return stringify(cfg);
}

function socketAddress(hostPort: string) {
  const colon = hostPort.lastIndexOf(":");
  return { socket_address: { address: hostPort.slice(0, colon), port_value: Number(hostPort.slice(colon + 1)) } };
}
