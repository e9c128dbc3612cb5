// How the aggregator's gRPC port (snapshot stream and ADS) admits a peer:
// mutual TLS with certificates read from files again every refreshMs (a
// rotated Secret is served to new connections without a restart), a cap on
// the streams open at once, message-size limits and keepalive. Its config
// rules (tls or loopback or plaintext: true) are checked in the config.
import { readFile } from "node:fs/promises";
import { createSecureContext } from "node:tls";
import * as grpc from "@grpc/grpc-js";
import type { AggregatorConfig } from "../config.js";

/**
 * The largest message a peer may send: Envoy's requests (ACKs, NACKs with
 * their error text, Hellos) are small. What the aggregator sends is bounded
 * by the snapshot's own size, not here.
 */
export const MAX_RECEIVE_BYTES = 4 * 1024 * 1024;

/** gRPC server options: keepalive reaps peers gone without a FIN, and a bound on what one message may be. */
export const SERVER_OPTIONS: grpc.ChannelOptions = {
  "grpc.keepalive_time_ms": 10_000,
  "grpc.keepalive_timeout_ms": 5_000,
  "grpc.max_receive_message_length": MAX_RECEIVE_BYTES,
  // One connection carries an Envoy's two streams; far more on one is a client misbehaving.
  "grpc.max_concurrent_streams": 16,
};

/**
 * Credentials for the gRPC port: mutual TLS from `aggregator.tls`, or none
 * (the config allowed it). Resolves once the files have been read and make a
 * working TLS context, so the first Envoy is not turned away; rejects naming
 * the field of a file that cannot be read or used.
 */
export async function serverCredentials(agg: Pick<AggregatorConfig, "tls">): Promise<grpc.ServerCredentials> {
  const tls = agg.tls;
  if (!tls) return grpc.ServerCredentials.createInsecure();
  const text: Record<string, Buffer> = {};
  for (const field of ["caFile", "certFile", "keyFile"] as const) {
    try {
      text[field] = await readFile(tls[field]);
    } catch (err) {
      throw new Error(`aggregator.tls.${field}: cannot read ${tls[field]}: ${(err as Error).message}`);
    }
  }
  try {
    createSecureContext({ ca: text.caFile, cert: text.certFile, key: text.keyFile });
  } catch (err) {
    throw new Error(`aggregator.tls: ${tls.certFile}, ${tls.keyFile} and ${tls.caFile} make no TLS context: ${(err as Error).message}`);
  }
  const identity = new grpc.experimental.FileWatcherCertificateProvider({ certificateFile: tls.certFile, privateKeyFile: tls.keyFile, refreshIntervalMs: tls.refreshMs });
  const ca = new grpc.experimental.FileWatcherCertificateProvider({ caCertificateFile: tls.caFile, refreshIntervalMs: tls.refreshMs });
  // Both providers have read their files before the server asks them; they
  // keep reading only while the server listens (its own listeners).
  await Promise.all([
    new Promise<void>((resolve) => {
      const first = () => (identity.removeIdentityCertificateListener(first), resolve());
      identity.addIdentityCertificateListener(first);
    }),
    new Promise<void>((resolve) => {
      const first = () => (ca.removeCaCertificateListener(first), resolve());
      ca.addCaCertificateListener(first);
    }),
  ]);
  // Every client must present a certificate that chains to the CA. (This
  // grpc-js names the factory's first two parameters the other way round;
  // the first is the server's own identity.)
  return grpc.experimental.createCertificateProviderServerCredentials(identity, ca, true);
}

/** A stream's peer for the log: its address, and the subject of its client certificate when it showed one. */
export function describePeer(call: Pick<grpc.ServerDuplexStream<unknown, unknown>, "getPeer" | "getAuthContext">): string {
  const cn = call.getAuthContext().sslPeerCertificate?.subject?.CN;
  return cn ? `${call.getPeer()} (CN=${cn})` : call.getPeer();
}

/** Open streams across every service on the port, refused past the cap. */
export interface StreamGate {
  open(): number;
  /** Streams refused so far. */
  refused(): number;
}

type DuplexHandler = (call: grpc.ServerDuplexStream<unknown, unknown>) => void;

/**
 * Wraps each service's streaming handlers so that past `max` open streams a
 * new one ends at once with RESOURCE_EXHAUSTED (counted, logged); a stream
 * frees its place however it ends.
 */
export function capStreams(
  services: ReadonlyArray<{ definition: grpc.ServiceDefinition; implementation: grpc.UntypedServiceImplementation }>,
  opts: { max: number; log: (line: string) => void; onRefused?: (service: string) => void },
): { gate: StreamGate; services: Array<{ definition: grpc.ServiceDefinition; implementation: grpc.UntypedServiceImplementation }> } {
  let open = 0;
  let refused = 0;
  const wrap = (name: string, handler: DuplexHandler): DuplexHandler => (call) => {
    if (open >= opts.max) {
      refused++;
      opts.onRefused?.(name);
      opts.log(`refused a ${name} stream from ${call.getPeer()}: ${open} streams open (aggregator.maxStreams ${opts.max})`);
      call.emit("error", { code: grpc.status.RESOURCE_EXHAUSTED, details: `too many streams (aggregator.maxStreams ${opts.max})` });
      return;
    }
    open++;
    let freed = false;
    const free = () => {
      if (!freed) open--;
      freed = true;
    };
    call.on("close", free);
    call.on("cancelled", free);
    call.on("error", free);
    call.on("finish", free);
    handler(call);
  };
  return {
    gate: { open: () => open, refused: () => refused },
    services: services.map(({ definition, implementation }) => ({
      definition,
      implementation: Object.fromEntries(
        Object.entries(implementation).map(([method, handler]) => [method, wrap(method, handler as DuplexHandler)]),
      ) as grpc.UntypedServiceImplementation,
    })),
  };
}
