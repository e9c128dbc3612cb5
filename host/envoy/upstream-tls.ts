// The transport socket of a cluster that speaks TLS to what it connects to
// (pods, the aggregator, a JWKS host): TLS 1.2 at least, and SNI carrying
// the server's name, never an IP literal (the SAN check holds either way).
import { isIP } from "node:net";

export const TLS_SOCKET = "envoy.transport_sockets.tls";

/**
 * An UpstreamTlsContext transport socket for a server named `serverName`
 * (none: no SNI), with `common` (certificates, validation, ALPN) in its
 * common_tls_context.
 */
export function upstreamTlsSocket(serverName: string | undefined, common: Record<string, unknown>): Record<string, unknown> {
  return {
    name: TLS_SOCKET,
    typed_config: {
      "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
      ...(serverName && isIP(serverName) === 0 ? { sni: serverName } : {}),
      common_tls_context: { tls_params: { tls_minimum_protocol_version: "TLSv1_2" }, ...common },
    },
  };
}

/** Checks the server's certificate for `serverName`, as a DNS name or an IP address. */
export function sanMatcher(serverName: string): Record<string, unknown>[] {
  return [{ san_type: isIP(serverName) !== 0 ? "IP_ADDRESS" : "DNS", matcher: { exact: serverName } }];
}
