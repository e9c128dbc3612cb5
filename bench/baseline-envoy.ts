// Envoy without our filter, for comparisons: derived from the gateway's own
// rendered bootstrap so the listener, route table, buffer limits, timeouts,
// retries and outlier detection stay identical and only the choice of pod
// differs. The Wasm service and filter and the ADS link go; each pool becomes
// a STATIC cluster with one of Envoy's own load balancers, and its route
// matches the request alone (or POOL_HEADER) instead of the filter's choice.
// The pools' stream routes go too: without the filter nothing marks a
// request as streamed, so streams get no idle timeout here.
import { parse, stringify } from "yaml";

export type EnvoyLbPolicy = "ROUND_ROBIN" | "LEAST_REQUEST";

/** With several pools, requests carry this header naming theirs (as a client would pick a per-model Service). */
export const POOL_HEADER = "x-bench-pool";

const WASM_BOOTSTRAP_EXTENSION = "envoy.bootstrap.wasm";
const WASM_HTTP_FILTER = "envoy.filters.http.wasm";
const POOL_CLUSTER_PREFIX = "llm_gateway_pool_";
// What the filter sets to pick a pool's route, and a pool's stream route.
const FILTER_POOL_HEADER = "x-gateway-pool";
const FILTER_STREAM_HEADER = "x-gateway-stream";

interface Named {
  name: string;
  [key: string]: unknown;
}

interface HeaderMatch {
  name: string;
  [key: string]: unknown;
}

interface Route {
  match: { headers?: HeaderMatch[]; [key: string]: unknown };
  route?: { cluster?: string; [key: string]: unknown };
  [key: string]: unknown;
}

export interface Bootstrap {
  bootstrap_extensions?: Named[];
  dynamic_resources?: unknown;
  stats_config?: unknown;
  static_resources: {
    listeners: Array<{ filter_chains: Array<{ filters: Array<{ typed_config?: HttpConnectionManager }> }> }>;
    clusters: Named[];
  };
}

interface HttpConnectionManager {
  http_filters?: Named[];
  route_config?: { virtual_hosts: Array<{ routes: Route[] }> };
}

/** Every listener filter's typed config: the HTTP connection managers among them. */
export const connectionManagers = (cfg: Bootstrap) => cfg.static_resources.listeners.flatMap((l) => l.filter_chains.flatMap((c) => c.filters.map((f) => f.typed_config)));

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

  if (!cfg.dynamic_resources) throw templateDrift("dynamic_resources (the ADS link)");
  delete cfg.dynamic_resources;
  // Its tag rules and buckets are for the filter's stats, which the baseline has not.
  delete cfg.stats_config;

  const hcm = connectionManagers(cfg).find((h) => h?.http_filters?.some((f) => f.name === WASM_HTTP_FILTER));
  if (!hcm?.http_filters || !hcm.route_config) throw templateDrift(`the ${WASM_HTTP_FILTER} HTTP filter`);
  hcm.http_filters = hcm.http_filters.filter((f) => f.name !== WASM_HTTP_FILTER);

  const clusters = cfg.static_resources.clusters;
  const i = clusters.findIndex((c) => c.name.startsWith(POOL_CLUSTER_PREFIX));
  if (i < 0) throw templateDrift(`a ${POOL_CLUSTER_PREFIX}* cluster`);
  // Connect timeout, outlier detection and circuit breakers carry over; discovery and override_host do not.
  const { type: _type, eds_cluster_config: _eds, load_balancing_policy: _lb, name: _name, ...common } = clusters[i];
  const clusterName = (pool: BaselinePool) => `${POOL_CLUSTER_PREFIX}${pool.name}`;
  const baselineClusters = pools.map((pool) => ({
    ...common,
    name: clusterName(pool),
    type: "STATIC",
    lb_policy: lbPolicy,
    load_assignment: {
      cluster_name: clusterName(pool),
      endpoints: [{ lb_endpoints: pool.endpoints.map((hostPort) => ({ endpoint: { address: socketAddress(hostPort) } })) }],
    },
  }));
  cfg.static_resources.clusters = [
    ...clusters.slice(0, i),
    ...baselineClusters,
    ...clusters.slice(i).filter((c) => !c.name.startsWith(POOL_CLUSTER_PREFIX)),
  ];

  const host = hcm.route_config.virtual_hosts[0];
  const isPoolRoute = (r: Route) => r.route?.cluster?.startsWith(POOL_CLUSTER_PREFIX) ?? false;
  const r = host.routes.findIndex(isPoolRoute);
  const template = host.routes.find((x) => isPoolRoute(x) && !x.match.headers?.some((h) => h.name === FILTER_STREAM_HEADER));
  if (r < 0 || !template) throw templateDrift("a route to a pool cluster");
  const headers = (template.match.headers ?? []).filter((h) => h.name !== FILTER_POOL_HEADER);
  const baselineRoutes = pools.map((pool) => ({
    ...template,
    match: {
      ...template.match,
      headers: pools.length === 1 ? headers : [...headers, { name: POOL_HEADER, string_match: { exact: pool.name } }],
    },
    route: { ...template.route, cluster: clusterName(pool) },
  }));
  host.routes = [...host.routes.slice(0, r), ...baselineRoutes, ...host.routes.slice(r).filter((x) => !isPoolRoute(x))];
  // A route that turns the filter off (CONNECT's) names a filter that is no longer there.
  for (const route of host.routes) {
    const perFilter = route.typed_per_filter_config as Record<string, unknown> | undefined;
    if (perFilter) delete perFilter[WASM_HTTP_FILTER];
  }
  return stringify(cfg);
}

function socketAddress(hostPort: string) {
  const colon = hostPort.lastIndexOf(":");
  return { socket_address: { address: hostPort.slice(0, colon), port_value: Number(hostPort.slice(colon + 1)) } };
}
