// The config of the link between Envoy and the aggregator (snapshot stream
// and ADS on one gRPC port): mutual TLS from certificate files on both
// sides, the stream cap, and the rule that keeps it closed: without TLS the
// aggregator must bind loopback, or the config must say `plaintext: true`.
import { resolve } from "node:path";
import * as z from "zod";
import { msg } from "../validation.js";

/** The aggregator's side: its own identity, and the CA every client certificate must chain to. */
export interface AggregatorTlsConfig {
  caFile: string;
  certFile: string;
  keyFile: string;
  /** How often the three files are read again, so a rotated certificate is served without a restart. */
  refreshMs: number;
}

/** Envoy's side: its client identity, the CA the aggregator's certificate must chain to, and the name it must carry. */
export interface ControlPlaneClientTlsConfig {
  caFile: string;
  certFile: string;
  keyFile: string;
  /** SNI sent, and the DNS SAN the aggregator's certificate must hold; default aggregator.host. */
  serverName?: string;
}

export const DEFAULT_MAX_STREAMS = 256;
export const DEFAULT_TLS_REFRESH_MS = 5_000;

const file = (what: string) => z.string({ error: msg(`expected the path of ${what}`) }).min(1, { error: `expected the path of ${what}` });

export const aggregatorTlsSchema = z.strictObject({
  caFile: file("the CA certificate (PEM) client certificates must chain to"),
  certFile: file("the aggregator's certificate chain (PEM)"),
  keyFile: file("the aggregator's private key (PEM)"),
  refreshMs: z.number().int().min(100).max(3_600_000).default(DEFAULT_TLS_REFRESH_MS),
});

export const controlPlaneClientTlsSchema = z.strictObject({
  caFile: file("the CA certificate (PEM) the aggregator's certificate must chain to"),
  certFile: file("Envoy's client certificate chain (PEM)"),
  keyFile: file("Envoy's client private key (PEM)"),
  serverName: z.string().min(1).optional(),
});

/** Streams (snapshot and ADS together) the aggregator holds open at once; each Envoy holds two. */
export const maxStreamsSchema = z.number().int().min(1).max(100_000).default(DEFAULT_MAX_STREAMS);

/** Whether a listening host is on this machine only, so plaintext cannot leave it. */
export function isLoopbackHost(host: string): boolean {
  return host === "localhost" || host === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

interface LinkSections {
  gateway: { controlPlaneTls?: ControlPlaneClientTlsConfig };
  aggregator: { host: string; tls?: AggregatorTlsConfig; plaintext: boolean };
}

/** The link's config problems, each naming its field. */
export function controlPlaneIssues({ gateway, aggregator }: LinkSections): string[] {
  const issues: string[] = [];
  const tls = aggregator.tls !== undefined;
  if (tls && aggregator.plaintext) issues.push("aggregator.plaintext: cannot be true together with aggregator.tls");
  if (!tls && !aggregator.plaintext && !isLoopbackHost(aggregator.host)) {
    issues.push(
      `aggregator.tls: required when aggregator.host (${aggregator.host}) is not a loopback address: anyone who reaches the port could read every pool, pod and route; give { caFile, certFile, keyFile }, or set aggregator.plaintext: true to accept that`,
    );
  }
  if (tls && gateway.controlPlaneTls === undefined) {
    issues.push("gateway.controlPlaneTls: required when aggregator.tls is set (Envoy's client certificate: { caFile, certFile, keyFile })");
  }
  if (!tls && gateway.controlPlaneTls !== undefined) issues.push("gateway.controlPlaneTls: needs aggregator.tls (the aggregator would not speak TLS)");
  return issues;
}

/** Resolves the link's certificate paths against the config file's folder, in place. */
export function resolveControlPlanePaths(sections: LinkSections, dir: string): void {
  for (const tls of [sections.aggregator.tls, sections.gateway.controlPlaneTls]) {
    if (!tls) continue;
    tls.caFile = resolve(dir, tls.caFile);
    tls.certFile = resolve(dir, tls.certFile);
    tls.keyFile = resolve(dir, tls.keyFile);
  }
}
