// The gateway's edge in the config file: HTTPS at the listener, TLS to a
// pool's pods, and the limits that keep a slow or hostile client from
// holding Envoy's memory. Envoy renders them (host/envoy/edge.ts).
import { isIP } from "node:net";
import { dirname, resolve } from "node:path";
import * as z from "zod";
import { msg } from "../validation.js";

/** The listener's certificate, from files Envoy watches (SDS), and optionally the clients' CA. */
export interface ListenerTlsConfig {
  certFile: string;
  keyFile: string;
  /** A CA bundle; present, Envoy asks for a client certificate and verifies one it is given. */
  clientCaFile?: string;
  /** Refuse a handshake without a client certificate signed by clientCaFile. */
  requireClientCert: boolean;
}

/** How Envoy and the aggregator reach a pool's pods over TLS. */
export interface PodTlsConfig {
  /** The CA bundle the pods' certificates must chain to. */
  caFile: string;
  /** SNI and the name the pods' certificates must carry; absent, the certificate's chain alone is checked. */
  serverName?: string;
  /** A client certificate for pods that ask for one (both or neither with keyFile). */
  certFile?: string;
  keyFile?: string;
}

/** What one client may make Envoy hold, and for how long. */
export interface EdgeLimitsConfig {
  /** A request's headers must have arrived this long after its connection opened (HCM request_headers_timeout). */
  requestHeadersTimeoutMs: number;
  /** A request must be received whole, and held requests dispatched, within this (HCM request_timeout). */
  requestTimeoutMs: number;
  /** A stream with no bytes either way this long is cut (HCM stream_idle_timeout). */
  streamIdleTimeoutMs: number;
  /** A connection with no stream open this long is closed (HCM common idle_timeout). */
  connectionIdleTimeoutMs: number;
  /** Streams one HTTP/2 connection may have open at once; each may buffer up to maxBodyBytes. */
  maxConcurrentStreams: number;
  /** The heap Envoy's overload manager measures against; past fractions of it, Envoy sheds load. */
  maxHeapBytes: number;
  /** Open client connections, all listeners together. */
  maxConnections: number;
  /** What Envoy reads from one connection before it stops reading; a stream still buffers up to maxBodyBytes. */
  connectionBufferBytes: number;
}

const path = (what: string) => z.string({ error: msg(`expected the path of ${what}`) }).min(1, { error: `expected the path of ${what}` });

export const listenerTlsSchema = z
  .strictObject({
    certFile: path("a PEM certificate (chain)"),
    keyFile: path("a PEM private key"),
    clientCaFile: path("a PEM CA bundle").optional(),
    requireClientCert: z.boolean({ error: msg("expected true or false") }).default(false),
  })
  .superRefine((tls, ctx) => {
    if (tls.requireClientCert && tls.clientCaFile === undefined) {
      ctx.addIssue({ code: "custom", path: ["clientCaFile"], message: "is required when requireClientCert is true (the CA client certificates must chain to)" });
    }
  });

export const podTlsSchema = z
  .strictObject({
    caFile: path("a PEM CA bundle"),
    serverName: z.string({ error: msg("expected a DNS name") }).regex(/^[A-Za-z0-9.-]{1,253}$/, { error: "expected a DNS name" }).optional(),
    certFile: path("a PEM certificate (chain)").optional(),
    keyFile: path("a PEM private key").optional(),
  })
  .superRefine((tls, ctx) => {
    if ((tls.certFile === undefined) !== (tls.keyFile === undefined)) {
      ctx.addIssue({ code: "custom", path: [tls.certFile === undefined ? "certFile" : "keyFile"], message: "certFile and keyFile go together (a client certificate and its key)" });
    }
  });

const ms = (min: number, max: number) => {
  const text = `expected an integer ${min}..${max} (ms)`;
  return z.number({ error: msg(text) }).int({ error: text }).min(min, { error: text }).max(max, { error: text });
};
const count = (max: number) => {
  const text = `expected an integer 1..${max}`;
  return z.number({ error: msg(text) }).int({ error: text }).min(1, { error: text }).max(max, { error: text });
};
const HOUR_MS = 3_600_000;
const MiB = 1024 * 1024;

export const edgeLimitsSchema = z
  .strictObject({
    // Headers are a few KB: a client that needs more than 10 s is stalling.
    requestHeadersTimeoutMs: ms(100, HOUR_MS).default(10_000),
    // Upload plus the longest hold a profile allows (599 s), with room.
    requestTimeoutMs: ms(1_000, 2 * HOUR_MS).default(660_000),
    // SSE streams may sit silent while a request waits in an engine's queue.
    streamIdleTimeoutMs: ms(1_000, 2 * HOUR_MS).default(600_000),
    connectionIdleTimeoutMs: ms(1_000, 2 * HOUR_MS).default(300_000),
    // Envoy's own default is 2^31-1; each stream may buffer a whole body.
    maxConcurrentStreams: count(10_000).default(100),
    // Envoy idles at ~100 MiB with the filter's VMs; shedding starts at half of this.
    maxHeapBytes: z.number({ error: msg("expected an integer number of bytes >= 64 MiB") }).int().min(64 * MiB, { error: "expected an integer number of bytes >= 64 MiB" }).default(256 * MiB),
    // Far above what one gateway's GPUs can serve; bounds file descriptors.
    maxConnections: count(10_000_000).default(50_000),
    // Small, so a flood of uploads is read a little at a time and the heap monitor keeps up.
    connectionBufferBytes: z.number({ error: msg("expected an integer 16384..16777216 (bytes)") }).int().min(16 * 1024).max(16 * MiB).default(64 * 1024),
  })
  .prefault({});

/** Checks across the edge fields; `longestHoldMs` is the longest a profile may hold a request, which the timeouts must outlast. */
export function checkEdge(
  gateway: { host: string; tls?: ListenerTlsConfig; plaintext: boolean; limits: EdgeLimitsConfig },
  longestHoldMs: number,
): string[] {
  const issues: string[] = [];
  if (!gateway.tls && !gateway.plaintext && !isLoopback(gateway.host)) {
    issues.push(`gateway.tls: is required when gateway.host (${gateway.host}) is not a loopback address; set gateway.plaintext: true to serve plain HTTP there on purpose`);
  }
  if (gateway.tls && gateway.plaintext) issues.push("gateway.plaintext: true contradicts gateway.tls (drop one)");
  if (gateway.limits.requestTimeoutMs <= longestHoldMs) {
    issues.push(`gateway.limits.requestTimeoutMs: must be greater than the longest hold a profile allows (${longestHoldMs} ms), or a held request is cut with a 408`);
  }
  if (gateway.limits.streamIdleTimeoutMs <= longestHoldMs) {
    issues.push(`gateway.limits.streamIdleTimeoutMs: must be greater than the longest hold a profile allows (${longestHoldMs} ms): a held request is silent, and would be cut with a 408`);
  }
  return issues;
}

/** 127.0.0.0/8, ::1 and localhost: reachable from this machine only. */
export function isLoopback(host: string): boolean {
  if (host === "localhost") return true;
  if (isIP(host) === 4) return host.startsWith("127.");
  return host === "::1" || host === "0:0:0:0:0:0:0:1";
}

/** The file paths made absolute against the config file's folder. */
export function resolveEdgePaths<T extends Partial<Record<"certFile" | "keyFile" | "clientCaFile" | "caFile", string>>>(tls: T, configPath: string): T {
  const out = { ...tls };
  for (const key of ["certFile", "keyFile", "clientCaFile", "caFile"] as const) {
    if (typeof out[key] === "string") (out as Record<string, string>)[key] = resolve(dirname(configPath), out[key] as string);
  }
  return out;
}
