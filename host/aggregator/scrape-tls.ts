// A pool's pods that serve HTTPS: the options a scrape connection dials them
// with, read from the pool's files at each new connection, so a rotated CA
// or client certificate is used from the next connection on.
import { readFileSync } from "node:fs";
import type { ConnectionOptions } from "node:tls";
import type { PodTlsConfig } from "../config/edge.js";

export function scrapeTlsOptions(tls: PodTlsConfig): ConnectionOptions {
  return {
    ca: readFileSync(tls.caFile),
    // Without a configured name the pod's certificate must chain to the CA;
    // its name is not checked (pods are dialled by IP), as Envoy does.
    ...(tls.serverName ? { servername: tls.serverName } : { checkServerIdentity: () => undefined }),
    ...(tls.certFile && tls.keyFile ? { cert: readFileSync(tls.certFile), key: readFileSync(tls.keyFile) } : {}),
    minVersion: "TLSv1.2",
    ALPNProtocols: ["http/1.1"],
  };
}
