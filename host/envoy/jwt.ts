// Envoy's jwt_authn filter for gateway.jwt, and the cluster that fetches a
// remote JWKS over TLS.
import { isAbsolute } from "node:path";
import { isIP } from "node:net";
import type { JwtConfig } from "../config.js";
import { sanMatcher, upstreamTlsSocket } from "./upstream-tls.js";

/** The one path open without a token: the readiness probe's (the filter answers it, with nothing about the fleet's pods). */
export const OPEN_PATH = "/health";
export const JWKS_CLUSTER = "llm_gateway_jwks";
const PROVIDER = "gateway";

export interface JwtAuthnParts {
  filter: Record<string, unknown>;
  /** The JWKS host's cluster, for a remote JWKS. */
  clusters: Array<Record<string, unknown>>;
}

/** The http_filters entry (and any cluster it needs); `claims` are copied into request headers after verification. */
export function jwtAuthn(jwt: JwtConfig, claims: Array<{ header_name: string; claim_name: string }>): JwtAuthnParts {
  const remote = jwt.jwksUri !== undefined;
  const provider: Record<string, unknown> = {
    issuer: jwt.issuer,
    ...(jwt.audiences.length > 0 ? { audiences: jwt.audiences } : {}),
    ...(remote ? { remote_jwks: remoteJwks(jwt) } : { local_jwks: { filename: localJwksFile(jwt) } }),
    require_expiration: jwt.requireExpiration,
    clock_skew_seconds: jwt.clockSkewSeconds,
    // Naming the sources turns off Envoy's defaults, which also read ?access_token=.
    from_headers: [{ name: "authorization", value_prefix: "Bearer " }],
    ...(jwt.allowQueryToken ? { from_params: ["access_token"] } : {}),
    // Copied after verification, so the header can only hold a claim of a
    // valid token: a client's own copy never got past early_header_mutation.
    ...(claims.length > 0 ? { claim_to_headers: claims } : {}),
  };
  return {
    filter: {
      name: "envoy.filters.http.jwt_authn",
      typed_config: {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication",
        providers: { [PROVIDER]: provider },
        // First match wins: the probe's path exactly, then everything.
        rules: [{ match: { path: OPEN_PATH } }, { match: { prefix: "/" }, requires: { provider_name: PROVIDER } }],
      },
    },
    clusters: remote ? [jwksCluster(jwt)] : [],
  };
}

function localJwksFile(jwt: JwtConfig): string {
  if (!isAbsolute(jwt.jwksFile ?? "")) throw new Error(`jwt.jwksFile must be absolute, got ${jwt.jwksFile}`);
  return jwt.jwksFile!;
}

function remoteJwks(jwt: JwtConfig): Record<string, unknown> {
  return {
    http_uri: { uri: jwt.jwksUri, cluster: JWKS_CLUSTER, timeout: "5s" },
    cache_duration: `${jwt.jwksCacheDurationS}s`,
    // Fetched on the main thread before the listener opens, and again ahead
    // of the cache's expiry: no request waits on (or fails for) a cold cache.
    async_fetch: { fast_listener: false, failed_refetch_duration: "1s" },
    retry_policy: { num_retries: 3, retry_back_off: { base_interval: "0.5s", max_interval: "5s" } },
  };
}

/** The JWKS host, reached over TLS only, its certificate checked against jwksCaFile and the URL's host name. */
function jwksCluster(jwt: JwtConfig): Record<string, unknown> {
  const url = new URL(jwt.jwksUri!);
  if (url.protocol !== "https:") throw new Error(`jwt.jwksUri must be https, got ${jwt.jwksUri}`);
  if (!isAbsolute(jwt.jwksCaFile)) throw new Error(`jwt.jwksCaFile must be absolute, got ${jwt.jwksCaFile}`);
  const host = url.hostname.replace(/^\[(.*)\]$/, "$1");
  const ip = isIP(host) !== 0;
  return {
    name: JWKS_CLUSTER,
    type: ip ? "STATIC" : "STRICT_DNS",
    dns_lookup_family: "V4_PREFERRED",
    connect_timeout: "5s",
    load_assignment: {
      cluster_name: JWKS_CLUSTER,
      endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: host, port_value: Number(url.port || 443) } } } }] }],
    },
    transport_socket: upstreamTlsSocket(host, {
      validation_context: { trusted_ca: { filename: jwt.jwksCaFile }, match_typed_subject_alt_names: sanMatcher(host) },
    }),
  };
}
