// Envoy's side of the mutual TLS link to the aggregator: the static
// aggregator cluster gets an UpstreamTlsContext whose client certificate and
// CA come from file-watched SDS (one small SDS file per secret, written next
// to the bootstrap), so a rotated Secret is picked up without a restart; the
// aggregator's certificate must chain to the CA and carry the server name.
import { isMap, isSeq, type Document } from "yaml";
import { certificateBody, sdsSecretConfig, sdsSecretFile, trustedCaBody, type SdsFile } from "./sds.js";
import { sanMatcher, upstreamTlsSocket } from "./upstream-tls.js";
import type { ControlPlaneClientTlsConfig } from "../config/control-plane.js";

export const AGGREGATOR_CLUSTER = "llm_gateway_aggregator";
const CLIENT_SECRET = "llm_gateway_aggregator_client";
const CA_SECRET = "llm_gateway_aggregator_ca";

/** The client side's files, and the folder its SDS files go in (where the bootstrap is written). */
export interface ControlPlaneTlsParams extends ControlPlaneClientTlsConfig {
  sdsDir: string;
}

/** The SDS files the bootstrap's aggregator cluster refers to; write them before Envoy starts. */
export function controlPlaneSdsFiles(tls: ControlPlaneTlsParams): SdsFile[] {
  return [sdsSecretFile(tls.sdsDir, CLIENT_SECRET, certificateBody(tls.certFile, tls.keyFile)), sdsSecretFile(tls.sdsDir, CA_SECRET, trustedCaBody(tls.caFile))];
}

/** Puts the UpstreamTlsContext on the bootstrap's aggregator cluster; `aggregatorHost` is the default server name. */
export function withControlPlaneTls(doc: Document, tls: ControlPlaneTlsParams, aggregatorHost: string): void {
  const clusters = doc.getIn(["static_resources", "clusters"]);
  if (!isSeq(clusters)) throw new Error("the Envoy template has no static clusters list");
  const cluster = clusters.items.find((c) => isMap(c) && c.get("name") === AGGREGATOR_CLUSTER);
  if (!isMap(cluster)) throw new Error(`the Envoy template has no ${AGGREGATOR_CLUSTER} cluster`);
  const [client, ca] = controlPlaneSdsFiles(tls);
  const serverName = tls.serverName ?? aggregatorHost;
  cluster.set("transport_socket", doc.createNode(upstreamTlsSocket(serverName, {
    alpn_protocols: ["h2"],
    tls_certificate_sds_secret_configs: [sdsSecretConfig(client, CLIENT_SECRET)],
    combined_validation_context: {
      default_validation_context: { match_typed_subject_alt_names: sanMatcher(serverName) },
      validation_context_sds_secret_config: sdsSecretConfig(ca, CA_SECRET),
    },
  })));
}
