import { readFileSync } from "node:fs";
import { isAbsolute, join } from "node:path";
import { isMap, isSeq, parseDocument, visit, type Document, type Node } from "yaml";
import type { GatewayConfig, JwtConfig, PassiveHealthConfig, StaleViewConfig } from "../config.js";
import { projectRoot } from "../paths.js";

/**
 * Extra room above max_body_bytes in Envoy's buffer limit, so an oversized
 * body reaches our filter (which answers 413 in OpenAI error format) before
 * Envoy's own plain-text 413 kicks in.
 */
export const BUFFER_SLACK_BYTES = 64 * 1024;

export interface EnvoyConfigParams {
  /** Listener address, e.g. "127.0.0.1" or "0.0.0.0". */
  gatewayHost: string;
  /** Listener port; 0 lets Envoy pick (read it back with EnvoyProcess.listenerAddresses). */
  gatewayPort: number;
  /** Admin port on 127.0.0.1; 0 lets Envoy pick (startEnvoy reads it back). */
  adminPort: number;
  /** Metrics aggregator gRPC endpoint: an IP or a DNS name. */
  aggregatorHost: string;
  aggregatorPort: number;
  /** Absolute path of build/filter.wasm. */
  wasmPath: string;
  /** Largest request body the filter accepts. */
  maxBodyBytes: number;
  /** The filter's view-age bound and policy; the filter's defaults when absent. */
  staleView?: StaleViewConfig;
  /** The filter's passive-health rules; the filter's defaults when absent. */
  passiveHealth?: PassiveHealthConfig;
  /** Pool names, in config order: one route and one EDS cluster each. */
  pools: string[];
  /** Require a JWT on every request (Envoy's jwt_authn filter, ahead of ours). */
  jwt?: JwtConfig;
  /** false leaves our Wasm HTTP filter out (tests: the routes alone must never reach a wrong host). */
  wasmFilter?: boolean;
}

export function gatewayTemplatePath(): string {
  return join(projectRoot, "envoy", "gateway.yaml");
}

/** Template parameters from a gateway config file's gateway and aggregator sections. */
export function envoyParamsFromGatewayConfig(
  cfg: GatewayConfig,
  opts: { wasmPath: string },
): EnvoyConfigParams {
  return {
    gatewayHost: cfg.gateway.host,
    gatewayPort: cfg.gateway.port,
    adminPort: cfg.gateway.adminPort,
    aggregatorHost: cfg.aggregator.host,
    aggregatorPort: cfg.aggregator.port,
    wasmPath: opts.wasmPath,
    maxBodyBytes: cfg.gateway.maxBodyBytes,
    staleView: cfg.gateway.staleView,
    passiveHealth: cfg.gateway.passiveHealth,
    pools: cfg.pools.map((p) => p.name),
    jwt: cfg.gateway.jwt,
  };
}

function checkInt(name: string, value: number, min: number, max: number): number {
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new Error(`${name} must be an integer in [${min}, ${max}], got ${value}`);
  }
  return value;
}

function checkString(name: string, value: string): string {
  if (typeof value !== "string" || value.trim() === "" || /\s/.test(value)) {
    throw new Error(`${name} must be a non-empty string without whitespace, got ${JSON.stringify(value)}`);
  }
  return value;
}

// As in the gateway config: the name goes into a header match and a cluster name.
const POOL_NAME = /^[A-Za-z0-9][A-Za-z0-9._:\/-]{0,255}$/;
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
  if (!isAbsolute(params.wasmPath)) throw new Error(`wasmPath must be absolute, got ${params.wasmPath}`);
  const maxBodyBytes = checkInt("maxBodyBytes", params.maxBodyBytes, 1, 2 ** 31 - 1 - BUFFER_SLACK_BYTES);
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
  repeatPerPool(doc, pools);
  if (params.jwt) withJwtAuthn(doc, params.jwt);
  if (params.wasmFilter === false) withoutWasmFilter(doc);
  const rendered = doc.toString();
  checkNoPlaceholders(rendered);
  return rendered;
}

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
  }
  return out;
}

function checkNoPlaceholders(text: string, except?: string): void {
  const left = [...new Set(text.match(/\$\{[^}]*\}/g) ?? [])].filter((p) => p !== except);
  if (left.length > 0) throw new Error(`unreplaced placeholders in Envoy config template: ${left.join(", ")}`);
}

const HCM = ["static_resources", "listeners", 0, "filter_chains", 0, "filters", 0, "typed_config"];
const ROUTES = [...HCM, "route_config", "virtual_hosts", 0, "routes"];
const CLUSTERS = ["static_resources", "clusters"];

/** Replaces every route and cluster that mentions the pool placeholder by one copy per pool. */
function repeatPerPool(doc: Document, pools: string[]): void {
  for (const path of [ROUTES, CLUSTERS]) {
    const seq = doc.getIn(path);
    if (!isSeq(seq)) throw new Error(`the Envoy template has no ${path.join(".")} list`);
    seq.items = seq.items.flatMap((item) => {
      if (!mentionsPool(item)) return [item];
      return pools.map((pool) => {
        const copy = (item as Node).clone() as Node;
        visit(copy, {
          Scalar(_, scalar) {
            if (typeof scalar.value === "string") scalar.value = scalar.value.replaceAll(POOL_PLACEHOLDER, pool);
          },
        });
        return copy;
      });
    });
  }
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

const HCM_FILTERS = [...HCM, "http_filters"];
const WASM_FILTER = "envoy.filters.http.wasm";

function httpFilters(doc: Document): { items: unknown[] } {
  const filters = doc.getIn(HCM_FILTERS);
  if (!isSeq(filters)) throw new Error("the Envoy template has no http_filters list");
  return filters;
}

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
function withJwtAuthn(doc: Document, jwt: JwtConfig): void {
  if (!isAbsolute(jwt.jwksFile)) throw new Error(`jwt.jwksFile must be absolute, got ${jwt.jwksFile}`);
  httpFilters(doc).items.splice(wasmFilterIndex(doc), 0, doc.createNode({
    name: "envoy.filters.http.jwt_authn",
    typed_config: {
      "@type": "type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication",
      providers: {
        gateway: {
          issuer: jwt.issuer,
          ...(jwt.audiences.length > 0 ? { audiences: jwt.audiences } : {}),
          local_jwks: { filename: jwt.jwksFile },
        },
      },
      rules: [{ match: { prefix: "/" }, requires: { provider_name: "gateway" } }],
    },
  }));
}
