import { readFileSync } from "node:fs";
import { isAbsolute, join } from "node:path";
import { parseDocument } from "yaml";
import type { GatewayConfig, JwtConfig } from "../config.js";
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
  /** Require a JWT on every request (Envoy's jwt_authn filter, ahead of ours). */
  jwt?: JwtConfig;
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

/**
 * Fills the Envoy bootstrap template (envoy/gateway.yaml by default).
 * Strings are inserted as JSON-quoted YAML scalars so no value can break the
 * document's structure; any placeholder without a value is an error.
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
    MAX_BODY_BYTES: String(maxBodyBytes),
    BUFFER_LIMIT_BYTES: String(maxBodyBytes + BUFFER_SLACK_BYTES),
  };
  const rendered = template.replace(/\$\{([A-Za-z0-9_]+)\}/g, (whole, name: string) => values[name] ?? whole);
  const left = [...new Set(rendered.match(/\$\{[^}]*\}/g) ?? [])];
  if (left.length > 0) throw new Error(`unreplaced placeholders in Envoy config template: ${left.join(", ")}`);
  return params.jwt ? withJwtAuthn(rendered, params.jwt) : rendered;
}

const HCM_FILTERS = ["static_resources", "listeners", 0, "filter_chains", 0, "filters", 0, "typed_config", "http_filters"];

/**
 * Puts Envoy's own jwt_authn filter first in the chain, so unauthenticated
 * requests are refused before the body is buffered; its 401 is rewritten into
 * the OpenAI error format by the template's local_reply_config.
 */
function withJwtAuthn(rendered: string, jwt: JwtConfig): string {
  if (!isAbsolute(jwt.jwksFile)) throw new Error(`jwt.jwksFile must be absolute, got ${jwt.jwksFile}`);
  const doc = parseDocument(rendered);
  const filters = doc.getIn(HCM_FILTERS) as { items: unknown[] } | undefined;
  if (!filters) throw new Error("the Envoy template has no http_filters list");
  filters.items.unshift(doc.createNode({
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
  return doc.toString();
}
