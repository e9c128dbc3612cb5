// The two Envoys being compared. "With filter" is the production template as
// rendered for the gateway; "without filter" is derived from that very
// rendering, so buffer limits, timeouts, the listener and the HTTP connection
// manager stay identical and only the routing differs.
import { parse, stringify } from "yaml";

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
    listeners: Array<{ filter_chains: Array<{ filters: Array<{ typed_config?: { http_filters?: Named[] } }> }> }>;
    clusters: Named[];
  };
}

function templateDrift(what: string): Error {
  return new Error(`overhead bench: the rendered gateway config no longer has ${what}; update bench/overhead/envoy-configs.ts`);
}

/**
 * The rendered gateway bootstrap minus the singleton Wasm service and the Wasm
 * HTTP filter, with the ORIGINAL_DST pods cluster replaced by a STATIC
 * ROUND_ROBIN cluster over `upstreams` ("ip:port" each).
 */
export function withoutFilterConfig(withFilterYaml: string, upstreams: string[]): string {
  const cfg = parse(withFilterYaml) as Bootstrap;

  const extensions = cfg.bootstrap_extensions ?? [];
  const keptExtensions = extensions.filter((e) => e.name !== WASM_BOOTSTRAP_EXTENSION);
  if (keptExtensions.length === extensions.length) throw templateDrift(`the ${WASM_BOOTSTRAP_EXTENSION} extension`);
  if (keptExtensions.length > 0) cfg.bootstrap_extensions = keptExtensions;
  else delete cfg.bootstrap_extensions;

  let removed = 0;
  for (const listener of cfg.static_resources.listeners) {
    for (const chain of listener.filter_chains) {
      for (const filter of chain.filters) {
        const hcm = filter.typed_config;
        if (!hcm?.http_filters) continue;
        const kept = hcm.http_filters.filter((f) => f.name !== WASM_HTTP_FILTER);
        removed += hcm.http_filters.length - kept.length;
        hcm.http_filters = kept;
      }
    }
  }
  if (removed === 0) throw templateDrift(`the ${WASM_HTTP_FILTER} HTTP filter`);

  const clusters = cfg.static_resources.clusters;
  const i = clusters.findIndex((c) => c.name === PODS_CLUSTER);
  if (i < 0) throw templateDrift(`the ${PODS_CLUSTER} cluster`);
  // Connect timeout and circuit breakers carry over; the ORIGINAL_DST-only fields do not.
  const { type: _type, lb_policy: _lb, original_dst_lb_config: _odst, cleanup_interval: _cleanup, ...common } = clusters[i];
  clusters[i] = {
    ...common,
    type: "STATIC",
    lb_policy: "ROUND_ROBIN",
    load_assignment: {
      cluster_name: PODS_CLUSTER,
      endpoints: [
        {
          lb_endpoints: upstreams.map((hostPort) => {
            const colon = hostPort.lastIndexOf(":");
            return {
              endpoint: {
                address: { socket_address: { address: hostPort.slice(0, colon), port_value: Number(hostPort.slice(colon + 1)) } },
              },
            };
          }),
        },
      ],
    },
  };
  return stringify(cfg);
}
