// Secrets Envoy reads from files it watches (SDS over the filesystem): each
// secret is a small JSON document beside the bootstrap naming the PEM files,
// and watching the PEMs' folder catches a Kubernetes Secret volume's atomic
// `..data` symlink swap, so certificates rotate without a restart.
import { dirname, join } from "node:path";

export const SECRET_TYPE = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret";

/** A file the bootstrap refers to, to be written beside it before Envoy starts. */
export interface SdsFile {
  path: string;
  content: string;
}

/** The SDS file holding one secret: `body` is its tls_certificate or validation_context. */
export function sdsSecretFile(dir: string, name: string, body: Record<string, unknown>): SdsFile {
  return { path: join(dir, `${name}.sds.json`), content: `${JSON.stringify({ resources: [{ "@type": SECRET_TYPE, name, ...body }] }, null, 2)}\n` };
}

/** A certificate and key, re-read together when their folder changes. */
export const certificateBody = (certFile: string, keyFile: string) => ({
  tls_certificate: { certificate_chain: { filename: certFile }, private_key: { filename: keyFile }, watched_directory: { path: dirname(certFile) } },
});

/** A CA bundle to verify peers against, re-read when its folder changes. */
export const trustedCaBody = (caFile: string) => ({
  validation_context: { trusted_ca: { filename: caFile }, watched_directory: { path: dirname(caFile) } },
});

/** The reference a TLS context makes to a secret in `file`. */
export const sdsSecretConfig = (file: SdsFile, name: string) => ({
  name,
  sds_config: { path_config_source: { path: file.path, watched_directory: { path: dirname(file.path) } }, resource_api_version: "V3" },
});
