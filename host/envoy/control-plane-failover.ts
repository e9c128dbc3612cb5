// Envoy's side of several aggregators (aggregator.leaderElection): the
// static aggregator cluster lists each of them (the peers, or every address
// a headless Service's name resolves to) and checks them with gRPC health
// checks, which only the leader passes (host/aggregator/standby.ts). With
// the panic threshold at 0 Envoy never opens a stream to a standby, so the
// snapshot link and ADS both follow the leader; both retry quickly, so a new
// leader is found within a few probe periods, and HTTP/2 pings end the
// streams of a leader that hangs.
import { isMap, isSeq, type Document } from "yaml";
import { parseEndpoint } from "../config.js";
import { AGGREGATOR_CLUSTER } from "./control-plane-tls.js";
import { withLinkSettings } from "./link-settings.js";

export interface ControlPlaneFailoverParams {
  /** Every aggregator's host:port; absent, the cluster's one address (a name that resolves to all of them). */
  peers?: string[];
  /** Health-check interval, and the snapshot link's and ADS's first retry delay. */
  probeMs: number;
}

/** The service name Envoy's health check asks about (the aggregator answers for its whole port). */
export const HEALTH_SERVICE = "llmgateway.v1.SnapshotService";
const HEALTH_TIMEOUT_MS = 1000;
/** Probe periods between HTTP/2 pings to an aggregator, and to wait for the answer. */
const KEEPALIVE_PROBES = 5;

const seconds = (ms: number) => `${ms / 1000}s`;

export function withControlPlaneFailover(doc: Document, params: ControlPlaneFailoverParams): void {
  const clusters = doc.getIn(["static_resources", "clusters"]);
  if (!isSeq(clusters)) throw new Error("the Envoy template has no static clusters list");
  const cluster = clusters.items.find((c) => isMap(c) && c.get("name") === AGGREGATOR_CLUSTER);
  if (!isMap(cluster)) throw new Error(`the Envoy template has no ${AGGREGATOR_CLUSTER} cluster`);
  const interval = seconds(params.probeMs);
  if (params.peers) {
    const lbEndpoints = params.peers.map((peer) => {
      const hp = parseEndpoint(peer);
      if (!hp) throw new Error(`aggregator.leaderElection.peers: ${peer} is not host:port`);
      return { endpoint: { address: { socket_address: { address: hp.host, port_value: hp.port } } } };
    });
    doc.setIn(["static_resources", "clusters", clusters.items.indexOf(cluster), "load_assignment", "endpoints"], doc.createNode([{ lb_endpoints: lbEndpoints }]));
  }
  cluster.set("health_checks", doc.createNode([{
    timeout: seconds(HEALTH_TIMEOUT_MS),
    interval,
    // The standby carries no traffic: without this it would be checked once a minute.
    no_traffic_interval: interval,
    unhealthy_threshold: 1,
    healthy_threshold: 1,
    grpc_health_check: { service_name: HEALTH_SERVICE },
  }]));
  // A leader that hangs keeps its TCP connections open and its streams
  // silent (failed health checks only drain them): HTTP/2 pings unanswered
  // for a few probe periods end them, so the link and ADS move on.
  const keepalive = ["typed_extension_protocol_options", "envoy.extensions.upstreams.http.v3.HttpProtocolOptions", "explicit_http_config", "http2_protocol_options", "connection_keepalive"];
  if (!isMap(cluster.getIn(keepalive))) throw new Error(`the Envoy template's ${AGGREGATOR_CLUSTER} cluster has no HTTP/2 keepalive`);
  cluster.setIn(keepalive, doc.createNode({ interval: seconds(params.probeMs * KEEPALIVE_PROBES), timeout: seconds(params.probeMs * KEEPALIVE_PROBES) }));
  // Envoy merges health changes for 1 s by default: the new leader's first passed check would wait that long.
  cluster.set("common_lb_config", doc.createNode({ healthy_panic_threshold: { value: 0 }, update_merge_window: "0s" }));

  const ads = doc.getIn(["dynamic_resources", "ads_config", "grpc_services", 0, "envoy_grpc"]);
  if (!isMap(ads)) throw new Error("the Envoy template's ADS has no envoy_grpc service");
  ads.set("retry_policy", doc.createNode({ retry_back_off: { base_interval: interval, max_interval: seconds(params.probeMs * 10) } }));

  withLinkSettings(doc, { reconnect_min_ms: params.probeMs, reconnect_max_ms: params.probeMs * 2 });
}
