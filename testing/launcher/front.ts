// A round-robin front for several gateway Envoys: another (plain) Envoy, as
// a cloud load balancer or a Kubernetes Service stands in front of the
// replicas in production. It sends each request to the next replica, checks
// every replica's /health (the filter's own answer: 200 while it can route),
// and sends a request whose replica refused the connection, reset it or
// refused the stream to another replica, so a replica that dies is skipped
// before the health check has noticed.
import { stringify } from "yaml";
import { parseEndpoint } from "../../host/config.js";
import { DEFAULT_EDGE_LIMITS } from "../../host/envoy/index.js";
import { startEnvoy, type EnvoyProcess } from "./envoy-process.js";

export const FRONT_LISTENER = "front";
const REPLICAS_CLUSTER = "gateway_replicas";

export interface FrontParams {
  host: string;
  /** 0 lets the OS pick. */
  port: number;
  /** On loopback; 0 lets the OS pick. */
  adminPort?: number;
  /** The replicas' listeners, host:port. */
  replicas: readonly string[];
  /** How often each replica's /health is asked; default 1000 ms. */
  healthCheckMs?: number;
  /** Open client connections the front holds at most; default the replicas' default caps added up. */
  maxConnections?: number;
}

const seconds = (ms: number) => `${ms / 1000}s`;

export function renderFrontBootstrap(p: FrontParams): string {
  if (p.replicas.length === 0) throw new Error("the front needs at least one replica");
  const interval = seconds(p.healthCheckMs ?? 1000);
  const endpoints = p.replicas.map((replica) => {
    const hp = parseEndpoint(replica);
    if (!hp) throw new Error(`front: replica ${replica} is not host:port`);
    return { endpoint: { address: { socket_address: { address: hp.host, port_value: hp.port } } } };
  });
  return stringify({
    admin: { address: { socket_address: { address: "127.0.0.1", port_value: p.adminPort ?? 0 } } },
    overload_manager: {
      resource_monitors: [{
        name: "envoy.resource_monitors.global_downstream_max_connections",
        typed_config: {
          "@type": "type.googleapis.com/envoy.extensions.resource_monitors.downstream_connections.v3.DownstreamConnectionsConfig",
          max_active_downstream_connections: p.maxConnections ?? DEFAULT_EDGE_LIMITS.maxConnections * p.replicas.length,
        },
      }],
    },
    static_resources: {
      listeners: [{
        name: FRONT_LISTENER,
        address: { socket_address: { address: p.host, port_value: p.port } },
        filter_chains: [{
          filters: [{
            name: "envoy.filters.network.http_connection_manager",
            typed_config: {
              "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
              stat_prefix: FRONT_LISTENER,
              route_config: {
                virtual_hosts: [{
                  name: "replicas",
                  domains: ["*"],
                  routes: [{
                    match: { prefix: "/" },
                    route: {
                      cluster: REPLICAS_CLUSTER,
                      // Streams run as long as the model writes; the replicas hold their own deadlines.
                      timeout: "0s",
                      retry_policy: {
                        // Only failures before the replica answered: nothing reached the client yet.
                        retry_on: "connect-failure,reset,refused-stream",
                        num_retries: Math.max(1, p.replicas.length - 1),
                        retry_host_predicate: [{
                          name: "envoy.retry_host_predicates.previous_hosts",
                          typed_config: { "@type": "type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate" },
                        }],
                        host_selection_retry_max_attempts: 5,
                      },
                    },
                  }],
                }],
              },
              http_filters: [{ name: "envoy.filters.http.router", typed_config: { "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router" } }],
            },
          }],
        }],
      }],
      clusters: [{
        name: REPLICAS_CLUSTER,
        type: "STATIC",
        lb_policy: "ROUND_ROBIN",
        connect_timeout: "1s",
        // A failed check takes the replica out at once, not after a merge window.
        common_lb_config: { update_merge_window: "0s" },
        load_assignment: { cluster_name: REPLICAS_CLUSTER, endpoints: [{ lb_endpoints: endpoints }] },
        health_checks: [{
          timeout: "1s",
          interval,
          no_traffic_interval: interval,
          unhealthy_threshold: 1,
          healthy_threshold: 1,
          http_health_check: { path: "/health" },
        }],
        // A refused or reset connection ejects the replica between two checks.
        outlier_detection: {
          split_external_local_origin_errors: true,
          consecutive_local_origin_failure: 1,
          interval,
          base_ejection_time: "5s",
          max_ejection_percent: 100,
        },
      }],
    },
  });
}

export interface Front {
  readonly envoy: EnvoyProcess;
  /** e.g. http://127.0.0.1:8000 */
  readonly url: string;
}

export async function startFront(p: FrontParams, opts: { logFile?: string; onLog?: (line: string) => void; concurrency?: number } = {}): Promise<Front> {
  const envoy = await startEnvoy({ configYaml: renderFrontBootstrap(p), concurrency: opts.concurrency ?? 1, logFile: opts.logFile, onLog: opts.onLog });
  return { envoy, url: `http://${envoy.listenerAddresses[FRONT_LISTENER]}` };
}
