import { readFileSync } from "node:fs";
import { isAbsolute, join } from "node:path";
import { isMap, isSeq, parseDocument, visit, type Document, type Node } from "yaml";
import { landingPools, servedModels, type GatewayConfig, type JwtConfig, type TrafficConfig } from "../config.js";
import { CONTRACT } from "../contract.js";
import { DEFAULT_EDGE_LIMITS, listenerSdsFiles, withEdgeLimits, withListenerTls, withPodTls } from "./edge.js";
import type { SdsFile } from "./sds.js";
import { projectRoot } from "../paths.js";
import { controlPlaneSdsFiles, withControlPlaneTls } from "./control-plane-tls.js";
import { withControlPlaneFailover } from "./control-plane-failover.js";
import { withLinkSettings } from "./link-settings.js";
import { jwtAuthn } from "./jwt.js";
import { streamIdleOf, withModelRoutes, withRateLimitFilter, withStreamRoutes } from "./model-routes.js";
import { CLAIM_HEADERS, type EnvoyConfigParams, type ModelRouteParams } from "./params.js";
import { checkInt, HCM, httpFilters, POOL_NAME, ROUTES } from "./template.js";
import { accessLog, otlpCluster, tracing } from "./telemetry.js";

/**
 * Extra room above max_body_bytes in Envoy's buffer limit, so an oversized
 * body reaches our filter (which answers 413 in OpenAI error format) before
 * Envoy's own plain-text 413 kicks in.
 */
export const BUFFER_SLACK_BYTES = 64 * 1024;

export function gatewayTemplatePath(): string {
  return join(projectRoot, "envoy", "gateway.yaml");
}

/** Template parameters from a gateway config file's gateway and aggregator sections. */
export function envoyParamsFromGatewayConfig(
  cfg: GatewayConfig,
  /** `sdsDir`: where the SDS files go (next to the bootstrap); needed with gateway.tls or gateway.controlPlaneTls. */
  opts: { wasmPath: string; sdsDir?: string },
): EnvoyConfigParams {
  const tls = cfg.gateway.controlPlaneTls;
  if (tls && opts.sdsDir === undefined) throw new Error("gateway.controlPlaneTls: the renderer needs a folder for its SDS files");
  const election = cfg.aggregator.leaderElection;
  return {
    gatewayHost: cfg.gateway.host,
    gatewayPort: cfg.gateway.port,
    adminPort: cfg.gateway.adminPort,
    statsPort: cfg.gateway.statsPort,
    aggregatorHost: cfg.aggregator.host,
    aggregatorPort: cfg.aggregator.port,
    wasmPath: opts.wasmPath,
    maxBodyBytes: cfg.gateway.maxBodyBytes,
    staleView: cfg.gateway.staleView,
    passiveHealth: cfg.gateway.passiveHealth,
    jwt: cfg.gateway.jwt,
    tls: cfg.gateway.tls,
    sdsDir: opts.sdsDir,
    limits: cfg.gateway.limits,
    accessLog: cfg.gateway.accessLog,
    tracing: cfg.gateway.tracing,
    traffic: cfg.traffic,
    ...(tls ? { controlPlaneTls: { ...tls, sdsDir: opts.sdsDir! } } : {}),
    ...(election ? { controlPlaneFailover: { peers: election.peers, probeMs: election.probeMs } } : {}),
    shareIntervalMs: cfg.aggregator.shareIntervalMs,
    ...routeParamsOf(cfg),
  };
}

/** What the route table and the pools' clusters are made of. */
function routeParamsOf(cfg: GatewayConfig): Pick<EnvoyConfigParams, "pools" | "streamIdleMs" | "modelRoutes" | "poolTls"> {
  return {
    pools: cfg.pools.map((p) => p.name),
    poolTls: Object.fromEntries(cfg.pools.flatMap((p) => (p.tls ? [[p.name, p.tls]] : []))),
    streamIdleMs: Object.fromEntries(cfg.pools.map((p) => [p.name, cfg.profiles[p.profile].deadlines.streamIdleMs])),
    modelRoutes: modelRoutesOf(cfg),
  };
}

/**
 * The `models:` entries with a route or a profile of their own (whose
 * streamIdleMs their stream routes take), each with the pools its requests
 * can land in.
 */
function modelRoutesOf(cfg: GatewayConfig): ModelRouteParams[] {
  const served = servedModels(cfg.pools);
  return cfg.models.flatMap((m) => {
    if (!m.route && m.profile === undefined) return [];
    const route: ModelRouteParams = { model: m.name, pools: landingPools(m, served).map((p) => cfg.pools[p].name), ...m.route };
    if (m.profile !== undefined) route.streamIdleMs = cfg.profiles[m.profile].deadlines.streamIdleMs;
    return [route];
  });
}


function checkString(name: string, value: string): string {
  if (typeof value !== "string" || value.trim() === "" || /\s/.test(value)) {
    throw new Error(`${name} must be a non-empty string without whitespace, got ${JSON.stringify(value)}`);
  }
  return value;
}

const POOL_PLACEHOLDER = "${POOL}";

function checkPools(pools: string[]): string[] {
  for (const p of pools) {
    if (typeof p !== "string" || !POOL_NAME.test(p)) throw new Error(`pool name ${JSON.stringify(p)} must match ${POOL_NAME}`);
  }
  const dup = pools.find((p, i) => pools.indexOf(p) !== i);
  if (dup !== undefined) throw new Error(`pool name ${dup} appears twice`);
  return pools;
}

/**
 * Fills the Envoy bootstrap template (envoy/gateway.yaml by default).
 * Strings are inserted as JSON-quoted YAML scalars so no value can break the
 * document's structure; every route and cluster mentioning the pool
 * placeholder is repeated per pool; any placeholder left over is an error.
 */
export function renderEnvoyConfig(
  params: EnvoyConfigParams,
  template: string = readFileSync(gatewayTemplatePath(), "utf8"),
): string {
  const rendered = renderDocument(params, template).doc.toString();
  checkNoPlaceholders(rendered);
  return rendered;
}

/** Clusters and route tables in proto3 JSON, as the template writes them: what the aggregator serves over ADS. */
export interface XdsResources {
  /** The pools' EDS clusters (CDS). */
  clusters: Array<Record<string, unknown>>;
  /** The listener's route table (RDS): the pool routes, model routes and fixed answers. */
  routeConfigs: Array<Record<string, unknown>>;
}

/** A bootstrap that takes the pools' clusters and the route table from the aggregator, and those resources. */
export interface EnvoyXdsConfig {
  bootstrap: string;
  resources: XdsResources;
}

/**
 * How long Envoy waits at startup for the clusters (CDS), then for the route
 * table (RDS), one after the other, before it serves without them (JSON 503s)
 * and takes them when the aggregator answers. Short: the aggregator answers
 * at once when it is up.
 */
const INITIAL_FETCH_TIMEOUT = "3s";
const OVER_ADS = { ads: {}, resource_api_version: "V3", initial_fetch_timeout: INITIAL_FETCH_TIMEOUT };

/**
 * The same rendering as renderEnvoyConfig, split for a control plane: the
 * pools' clusters go to CDS and the listener's route_config to RDS, so a
 * config reload changes them over the ADS stream without touching the
 * listener (a route change never drains a connection) or restarting Envoy.
 * The bootstrap keeps admin, the overload manager, the Wasm service, the
 * listener with its filters, and the static aggregator cluster. The local
 * rate limit filter is always in the chain (inert without a route's own
 * config), so a reload may give a model a rate limit.
 */
export function renderEnvoyXds(
  params: EnvoyConfigParams,
  template: string = readFileSync(gatewayTemplatePath(), "utf8"),
): EnvoyXdsConfig {
  const { doc, poolClusters } = renderDocument(params, template);
  withRateLimitFilter(doc);

  const hcm = doc.getIn(HCM);
  if (!isMap(hcm)) throw new Error("the Envoy template has no HTTP connection manager");
  const routeConfig = hcm.get("route_config");
  if (!isMap(routeConfig)) throw new Error("the Envoy template's listener has no inline route_config");
  hcm.delete("route_config");
  hcm.set("rds", doc.createNode({ route_config_name: routeConfig.get("name"), config_source: OVER_ADS }));

  const clusters = doc.getIn(CLUSTERS) as { items: unknown[] };
  clusters.items = clusters.items.filter((c) => !poolClusters.has(c));
  doc.setIn(["dynamic_resources", "cds_config"], doc.createNode(OVER_ADS));

  const bootstrap = doc.toString();
  const resources: XdsResources = {
    clusters: [...poolClusters].map((c) => (c as Node).toJSON() as Record<string, unknown>),
    routeConfigs: [routeConfig.toJSON() as Record<string, unknown>],
  };
  checkNoPlaceholders(bootstrap);
  checkNoPlaceholders(JSON.stringify(resources));
  return { bootstrap, resources };
}

/**
 * Placeholders for the bootstrap-only parameters when only the resources are
 * wanted: the aggregator does not have them all (the Wasm path is Envoy's),
 * and nothing it serves depends on them.
 */
const BOOTSTRAP_UNUSED = {
  gatewayHost: "127.0.0.1",
  gatewayPort: 0,
  adminPort: 0,
  aggregatorHost: "127.0.0.1",
  aggregatorPort: 1,
  wasmPath: "/unused.wasm",
  maxBodyBytes: 1,
} as const;

/** The resources for a gateway config, for the aggregator: only the pools and the models' routes shape them. */
export function xdsResourcesFromGatewayConfig(
  cfg: GatewayConfig,
  template: string = readFileSync(gatewayTemplatePath(), "utf8"),
): XdsResources {
  return renderEnvoyXds({ ...BOOTSTRAP_UNUSED, ...routeParamsOf(cfg) }, template).resources;
}

/** The template filled in, with one route and one cluster per pool; `poolClusters` are those clusters. */
function renderDocument(params: EnvoyConfigParams, template: string): { doc: Document; poolClusters: Set<unknown> } {
  if (!isAbsolute(params.wasmPath)) throw new Error(`wasmPath must be absolute, got ${params.wasmPath}`);
  const maxBodyBytes = checkInt("maxBodyBytes", params.maxBodyBytes, 1, CONTRACT.limits.maxBodyBytes);
  const values: Record<string, string> = {
    GATEWAY_HOST: JSON.stringify(checkString("gatewayHost", params.gatewayHost)),
    GATEWAY_PORT: String(checkInt("gatewayPort", params.gatewayPort, 0, 65535)),
    ADMIN_PORT: String(checkInt("adminPort", params.adminPort, 0, 65535)),
    AGGREGATOR_HOST: JSON.stringify(checkString("aggregatorHost", params.aggregatorHost)),
    AGGREGATOR_PORT: String(checkInt("aggregatorPort", params.aggregatorPort, 1, 65535)),
    WASM_PATH: JSON.stringify(params.wasmPath),
    FILTER_SETTINGS: JSON.stringify(JSON.stringify(filterSettings({ ...params, maxBodyBytes }))),
    BUFFER_LIMIT_BYTES: String(maxBodyBytes + BUFFER_SLACK_BYTES),
  };
  const pools = checkPools(params.pools);
  const filled = template.replace(/\$\{([A-Za-z0-9_]+)\}/g, (whole, name: string) => values[name] ?? whole);
  checkNoPlaceholders(filled, POOL_PLACEHOLDER);
  const doc = parseDocument(filled);
  repeatPerPool(doc, ROUTES, pools);
  const poolClusters = repeatPerPool(doc, CLUSTERS, pools);
  for (const [pool, tls] of Object.entries(params.poolTls ?? {})) withPodTls(doc, `llm_gateway_pool_${pool}`, tls);
  withModelRoutes(doc, params.modelRoutes ?? [], pools);
  withStreamRoutes(doc, streamIdleOf(params));
  const claims = claimHeaders(params.traffic);
  if (claims.length > 0 && !params.jwt) throw new Error("traffic gates that name a claim need jwt");
  if (params.jwt) withJwtAuthn(doc, params.jwt, claims);
  if (params.wasmFilter === false) withoutWasmFilter(doc);
  withTelemetry(doc, params);
  if (params.statsPort !== undefined) withStatsListener(doc, params);
  if (params.controlPlaneTls) withControlPlaneTls(doc, params.controlPlaneTls, params.aggregatorHost);
  if (params.controlPlaneFailover) withControlPlaneFailover(doc, params.controlPlaneFailover);
  if (params.shareIntervalMs !== undefined) withLinkSettings(doc, { share_interval_ms: checkInt("shareIntervalMs", params.shareIntervalMs, 0, 60_000) });
  withEdgeLimits(doc, params.limits ?? DEFAULT_EDGE_LIMITS);
  if (params.tls) {
    if (params.sdsDir === undefined) throw new Error("gateway.tls needs sdsDir, the folder its SDS files are written to");
    withListenerTls(doc, params.tls, params.sdsDir);
  }
  return { doc, poolClusters };
}

/** What each worker may hold when the plugin configuration says nothing (assembly/gateway/config.ts). */
const FILTER_QUEUE_DEFAULTS = { maxBytesPerWorker: 64 * 1024 * 1024, maxRequestsPerWorker: 4096 };

/** The Wasm filter's plugin configuration (assembly/gateway/config.ts reads it; unknown keys are refused there). */
function filterSettings(p: EnvoyConfigParams): Record<string, number | string> {
  const out: Record<string, number | string> = { max_body_bytes: p.maxBodyBytes };
  if (p.staleView) {
    out.max_view_age_ms = p.staleView.maxAgeMs;
    out.stale_view_policy = p.staleView.policy === "reject" ? "reject" : "fail_open";
    out.retry_after_s = p.staleView.retryAfterS;
  }
  if (p.passiveHealth) {
    out.eject_after_failures = p.passiveHealth.ejectAfterFailures;
    out.eject_ms = p.passiveHealth.ejectMs;
    out.saturated_backoff_ms = p.passiveHealth.saturatedBackoffMs;
  }
  // Only when they differ from the filter's defaults (none, off), so a
  // filter that does not know these keys still loads every other config.
  const critical = p.traffic?.critical ?? "none";
  if (critical !== "none") {
    out.critical_from = typeof critical === "string" ? critical : "claim";
    if (typeof critical === "object") out.critical_claim_values = claimValues(critical.values);
  }
  const debug = p.traffic?.debug ?? "off";
  if (debug !== "off") {
    out.debug = typeof debug === "string" ? debug : "claim";
    if (typeof debug === "object") out.debug_claim_values = claimValues(debug.values);
  }
  const tenant = p.traffic?.tenant ?? "none";
  if (tenant !== "none") out.tenant_from = typeof tenant === "string" ? tenant : "claim";
  // The access log's tokens field: one host call per answer with usage, so only when a log reads it.
  if (p.accessLog) out.usage_to_filter_state = "on";
  const queue = p.traffic?.queue;
  if (queue && queue.maxBytesPerWorker !== FILTER_QUEUE_DEFAULTS.maxBytesPerWorker) out.max_queued_bytes = queue.maxBytesPerWorker;
  if (queue && queue.maxRequestsPerWorker !== FILTER_QUEUE_DEFAULTS.maxRequestsPerWorker) out.max_queued_requests = queue.maxRequestsPerWorker;
  return out;
}

function claimValues(values: string[]): string {
  if (values.length === 0 || values.some((v) => v === "" || v.includes(","))) {
    throw new Error(`claim values must be non-empty and free of commas, got ${JSON.stringify(values)}`);
  }
  return values.join(",");
}

/** jwt_authn's claim_to_headers entries for the gates that name a claim. */
function claimHeaders(traffic: TrafficConfig | undefined): Array<{ header_name: string; claim_name: string }> {
  const out: Array<{ header_name: string; claim_name: string }> = [];
  for (const gate of ["critical", "debug", "tenant"] as const) {
    const g = traffic?.[gate];
    if (typeof g === "object") out.push({ header_name: CLAIM_HEADERS[gate], claim_name: checkString(`traffic.${gate}.claim`, g.claim) });
  }
  return out;
}

function checkNoPlaceholders(text: string, except?: string): void {
  const left = [...new Set(text.match(/\$\{[^}]*\}/g) ?? [])].filter((p) => p !== except);
  if (left.length > 0) throw new Error(`unreplaced placeholders in Envoy config template: ${left.join(", ")}`);
}

const CLUSTERS = ["static_resources", "clusters"];

/** Replaces every item of the list at `path` that mentions the pool placeholder by one copy per pool; returns the copies. */
function repeatPerPool(doc: Document, path: Array<string | number>, pools: string[]): Set<unknown> {
  const seq = doc.getIn(path);
  if (!isSeq(seq)) throw new Error(`the Envoy template has no ${path.join(".")} list`);
  const copies = new Set<unknown>();
  seq.items = seq.items.flatMap((item) => {
    if (!mentionsPool(item)) return [item];
    return pools.map((pool) => {
      const copy = (item as Node).clone() as Node;
      visit(copy, {
        Scalar(_, scalar) {
          if (typeof scalar.value === "string") scalar.value = scalar.value.replaceAll(POOL_PLACEHOLDER, pool);
        },
      });
      copies.add(copy);
      return copy;
    });
  });
  return copies;
}

function mentionsPool(item: unknown): boolean {
  let found = false;
  visit(item as Node, {
    Scalar(_, scalar) {
      if (typeof scalar.value === "string" && scalar.value.includes(POOL_PLACEHOLDER)) {
        found = true;
        return visit.BREAK;
      }
    },
  });
  return found;
}

const WASM_FILTER = "envoy.filters.http.wasm";

/** Index of our Wasm filter in the http_filters list. */
function wasmFilterIndex(doc: Document): number {
  const i = httpFilters(doc).items.findIndex((f) => isMap(f) && f.get("name") === WASM_FILTER);
  if (i < 0) throw new Error(`the Envoy template has no ${WASM_FILTER} HTTP filter`);
  return i;
}

function withoutWasmFilter(doc: Document): void {
  httpFilters(doc).items.splice(wasmFilterIndex(doc), 1);
}

/**
 * Puts Envoy's own jwt_authn filter right before ours, so unauthenticated
 * requests are refused before the body is buffered;
 * its 401 is rewritten into the OpenAI error format by the template's
 * local_reply_config.
 */
function withJwtAuthn(doc: Document, jwt: JwtConfig, claims: Array<{ header_name: string; claim_name: string }>): void {
  const { filter, clusters } = jwtAuthn(jwt, claims);
  httpFilters(doc).items.splice(wasmFilterIndex(doc), 0, doc.createNode(filter));
  const seq = doc.getIn(CLUSTERS);
  if (!isSeq(seq)) throw new Error("the Envoy template has no static clusters list");
  for (const c of clusters) seq.items.push(doc.createNode(c));
}

/** The access log and the tracer on the listener's connection manager, and the collector's cluster. */
function withTelemetry(doc: Document, p: EnvoyConfigParams): void {
  if (p.accessLog) doc.setIn([...HCM, "access_log"], doc.createNode(accessLog(p.accessLog)));
  if (p.tracing) {
    doc.setIn([...HCM, "tracing"], doc.createNode(tracing(p.tracing)));
    const seq = doc.getIn(CLUSTERS);
    if (!isSeq(seq)) throw new Error("the Envoy template has no static clusters list");
    seq.items.push(doc.createNode(otlpCluster(p.tracing)));
  }
}

/**
 * Admin stays on loopback (it can drain listeners and quit Envoy); Prometheus
 * in a cluster scrapes this listener instead, which forwards exactly one
 * read-only path to admin and answers everything else 404.
 */
function withStatsListener(doc: Document, p: EnvoyConfigParams): void {
  const statsPort = checkInt("statsPort", p.statsPort!, 1, 65535);
  if (p.adminPort === 0) throw new Error("statsPort needs a fixed adminPort");
  const listeners = doc.getIn(["static_resources", "listeners"]);
  const clusters = doc.getIn(CLUSTERS);
  if (!isSeq(listeners) || !isSeq(clusters)) throw new Error("the Envoy template has no static listeners or clusters list");
  listeners.items.push(doc.createNode({
    name: "llm_gateway_stats",
    address: { socket_address: { address: p.gatewayHost, port_value: statsPort } },
    enable_reuse_port: false,
    filter_chains: [{
      filters: [{
        name: "envoy.filters.network.http_connection_manager",
        typed_config: {
          "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
          stat_prefix: "llm_gateway_stats",
          route_config: {
            virtual_hosts: [{
              name: "stats",
              domains: ["*"],
              routes: [
                { match: { path: "/stats/prometheus", headers: [{ name: ":method", string_match: { exact: "GET" } }] }, route: { cluster: "llm_gateway_admin" } },
                { match: { prefix: "/" }, direct_response: { status: 404, body: { inline_string: "not found; try GET /stats/prometheus\n" } } },
              ],
            }],
          },
          http_filters: [{ name: "envoy.filters.http.router", typed_config: { "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router" } }],
        },
      }],
    }],
  }));
  clusters.items.push(doc.createNode({
    name: "llm_gateway_admin",
    type: "STATIC",
    connect_timeout: "1s",
    load_assignment: {
      cluster_name: "llm_gateway_admin",
      endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: "127.0.0.1", port_value: p.adminPort } } } }] }],
    },
  }));
}

/** Every SDS file a rendered bootstrap refers to (listener and aggregator link). */
export function envoySdsFiles(params: EnvoyConfigParams): SdsFile[] {
  const files: SdsFile[] = [];
  if (params.tls) {
    if (params.sdsDir === undefined) throw new Error("gateway.tls needs sdsDir, the folder its SDS files are written to");
    files.push(...listenerSdsFiles(params.tls, params.sdsDir));
  }
  if (params.controlPlaneTls) files.push(...controlPlaneSdsFiles(params.controlPlaneTls));
  return files;
}
