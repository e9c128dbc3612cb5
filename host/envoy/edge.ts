// The listener's edge in the Envoy bootstrap: HTTPS with certificates from
// file-watched SDS, the timeouts and buffer bounds that stop a slow client
// from holding memory, and the overload manager on heap; plus TLS to a
// pool's pods on its cluster.
import { isAbsolute } from "node:path";
import { isMap, isSeq, type Document } from "yaml";
import { certificateBody, sdsSecretConfig, sdsSecretFile, trustedCaBody, type SdsFile } from "./sds.js";
import { sanMatcher, TLS_SOCKET, upstreamTlsSocket } from "./upstream-tls.js";
import { edgeLimitsSchema, type EdgeLimitsConfig, type ListenerTlsConfig, type PodTlsConfig } from "../config/edge.js";

/** The limits a renderer uses when its caller gives none: the config file's defaults. */
export const DEFAULT_EDGE_LIMITS: Readonly<EdgeLimitsConfig> = edgeLimitsSchema.parse(undefined);

const LISTENER_CERT = "llm_gateway_listener_certificate";
const CLIENT_CA = "llm_gateway_client_ca";

function checkAbsolute(field: string, path: string | undefined): void {
  if (path !== undefined && !isAbsolute(path)) throw new Error(`${field} must be absolute, got ${path}`);
}

/**
 * The SDS documents for the listener's certificate and client CA. Each
 * secret names the PEM files and watches their folder: a Kubernetes Secret
 * volume swaps its `..data` symlink in one rename, which Envoy sees there
 * and answers by reading certificate and key again, together; new
 * handshakes get the new certificate, open connections keep theirs.
 */
export function listenerSdsFiles(tls: ListenerTlsConfig, sdsDir: string): SdsFile[] {
  for (const key of ["certFile", "keyFile", "clientCaFile"] as const) checkAbsolute(`gateway.tls.${key}`, tls[key]);
  checkAbsolute("sdsDir", sdsDir);
  const files = [sdsSecretFile(sdsDir, LISTENER_CERT, certificateBody(tls.certFile, tls.keyFile))];
  if (tls.clientCaFile) files.push(sdsSecretFile(sdsDir, CLIENT_CA, trustedCaBody(tls.clientCaFile)));
  return files;
}

/** The listener's filter chain terminates TLS 1.2+ and offers h2 before http/1.1. */
export function withListenerTls(doc: Document, tls: ListenerTlsConfig, sdsDir: string): void {
  const chain = doc.getIn(FILTER_CHAIN);
  if (!isMap(chain)) throw new Error("the Envoy template's listener has no filter chain");
  const [cert, ca] = listenerSdsFiles(tls, sdsDir);
  chain.set("transport_socket", doc.createNode({
    name: TLS_SOCKET,
    typed_config: {
      "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
      require_client_certificate: tls.requireClientCert,
      common_tls_context: {
        tls_params: { tls_minimum_protocol_version: "TLSv1_2" },
        alpn_protocols: ["h2", "http/1.1"],
        tls_certificate_sds_secret_configs: [sdsSecretConfig(cert, LISTENER_CERT)],
        ...(ca ? { validation_context_sds_secret_config: sdsSecretConfig(ca, CLIENT_CA) } : {}),
      },
    },
  }));
}

const MiB = 1024 * 1024;
const seconds = (ms: number) => `${ms / 1000}s`;

/**
 * Timeouts on the listener's connection manager, the HTTP/2 stream cap,
 * and the overload manager. Every stream may buffer a whole body (the
 * filter reads it before choosing a pod), so memory is bounded by the heap
 * monitor: past half of maxHeapBytes Envoy returns freed memory to the
 * system and resets the streams holding the largest buffers first (more
 * of them as the heap fills); near the cap it answers new requests 503.
 */
export function withEdgeLimits(doc: Document, limits: EdgeLimitsConfig): void {
  if (limits.maxHeapBytes < 64 * MiB) throw new Error(`maxHeapBytes must be at least 64 MiB, got ${limits.maxHeapBytes}`);
  // A connection's reads stay small, so a flood of uploads is read a little
  // at a time and the heap monitor sees it grow in time; a request's body
  // may still be buffered whole, up to the buffer filter's limit.
  doc.setIn([...LISTENER, "per_connection_buffer_limit_bytes"], limits.connectionBufferBytes);
  bufferBeforeWasm(doc);
  const hcm = doc.getIn(HCM);
  if (!isMap(hcm)) throw new Error("the Envoy template has no HTTP connection manager");
  hcm.set("request_headers_timeout", seconds(limits.requestHeadersTimeoutMs));
  hcm.set("request_timeout", seconds(limits.requestTimeoutMs));
  hcm.set("stream_idle_timeout", seconds(limits.streamIdleTimeoutMs));
  hcm.set("common_http_protocol_options", doc.createNode({ idle_timeout: seconds(limits.connectionIdleTimeoutMs) }));
  hcm.set("http2_protocol_options", doc.createNode({ max_concurrent_streams: limits.maxConcurrentStreams }));

  const heap = "envoy.resource_monitors.fixed_heap";
  const connections = "envoy.resource_monitors.global_downstream_max_connections";
  // Freed buffers go back to the system within a second, so the resident set follows the heap down.
  doc.set("memory_allocator_manager", doc.createNode({ bytes_to_release: 64 * MiB, memory_release_interval: "1s" }));
  doc.set("overload_manager", doc.createNode({
    refresh_interval: "0.1s",
    // Streams holding 256 KiB or more are tracked, by size, for the reset action.
    buffer_factory_config: { minimum_account_to_track_power_of_two: 18 },
    resource_monitors: [
      {
        name: heap,
        typed_config: { "@type": "type.googleapis.com/envoy.extensions.resource_monitors.fixed_heap.v3.FixedHeapConfig", max_heap_size_bytes: limits.maxHeapBytes },
      },
      {
        name: connections,
        typed_config: {
          "@type": "type.googleapis.com/envoy.extensions.resource_monitors.downstream_connections.v3.DownstreamConnectionsConfig",
          max_active_downstream_connections: limits.maxConnections,
        },
      },
    ],
    actions: [
      { name: "envoy.overload_actions.shrink_heap", triggers: [{ name: heap, threshold: { value: 0.3 } }] },
      {
        name: "envoy.overload_actions.reduce_timeouts",
        triggers: [{ name: heap, scaled: { scaling_threshold: 0.3, saturation_threshold: 0.45 } }],
        typed_config: {
          "@type": "type.googleapis.com/envoy.config.overload.v3.ScaleTimersOverloadActionConfig",
          timer_scale_factors: [
            { timer: "HTTP_DOWNSTREAM_STREAM_IDLE", min_timeout: "2s" },
            { timer: "HTTP_DOWNSTREAM_CONNECTION_IDLE", min_timeout: "2s" },
          ],
        },
      },
      { name: "envoy.overload_actions.reset_high_memory_stream", triggers: [{ name: heap, scaled: { scaling_threshold: 0.5, saturation_threshold: 0.8 } }] },
      { name: "envoy.overload_actions.stop_accepting_requests", triggers: [{ name: heap, threshold: { value: 0.9 } }] },
    ],
    loadshed_points: [
      { name: "envoy.load_shed_points.http1_server_abort_dispatch", triggers: [{ name: heap, threshold: { value: 0.5 } }] },
      { name: "envoy.load_shed_points.http2_server_go_away_on_dispatch", triggers: [{ name: heap, threshold: { value: 0.5 } }] },
      { name: "envoy.load_shed_points.http_connection_manager_decode_headers", triggers: [{ name: heap, threshold: { value: 0.6 } }] },
    ],
  }));
}

/**
 * The buffer filter, moved to just before our filter (after jwt_authn, so
 * a request without a valid token is still refused before its body is
 * read), sets the stream's own buffer limit to a whole body, above the
 * connection's small one.
 */
function bufferBeforeWasm(doc: Document): void {
  const filters = doc.getIn([...HCM, "http_filters"]);
  if (!isSeq(filters)) throw new Error("the Envoy template has no http_filters list");
  const named = (name: string) => filters.items.findIndex((f) => isMap(f) && f.get("name") === name);
  const buffer = named("envoy.filters.http.buffer");
  if (buffer < 0) throw new Error("the Envoy template has no buffer filter");
  const [node] = filters.items.splice(buffer, 1);
  const wasm = named("envoy.filters.http.wasm");
  filters.items.splice(wasm < 0 ? filters.items.length - 1 : wasm, 0, node);
}

/** The pool's cluster speaks TLS to its pods, verifying them against the pool's CA (and name, when given). */
export function withPodTls(doc: Document, clusterName: string, tls: PodTlsConfig): void {
  for (const key of ["caFile", "certFile", "keyFile"] as const) checkAbsolute(`tls.${key} of ${clusterName}`, tls[key]);
  const clusters = doc.getIn(CLUSTERS);
  if (!isSeq(clusters)) throw new Error("the Envoy template has no clusters list");
  const cluster = clusters.items.find((c) => isMap(c) && c.get("name") === clusterName);
  if (!isMap(cluster)) throw new Error(`the Envoy template has no cluster ${clusterName}`);
  const validation: Record<string, unknown> = { trusted_ca: { filename: tls.caFile } };
  if (tls.serverName) validation.match_typed_subject_alt_names = sanMatcher(tls.serverName);
  cluster.set("transport_socket", doc.createNode(upstreamTlsSocket(tls.serverName, {
    validation_context: validation,
    ...(tls.certFile ? { tls_certificates: [{ certificate_chain: { filename: tls.certFile }, private_key: { filename: tls.keyFile } }] } : {}),
  })));
}

const LISTENER = ["static_resources", "listeners", 0];
const FILTER_CHAIN = [...LISTENER, "filter_chains", 0];
const HCM = [...FILTER_CHAIN, "filters", 0, "typed_config"];
const CLUSTERS = ["static_resources", "clusters"];
