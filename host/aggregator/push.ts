// gRPC server for llmgateway.v1.SnapshotService/Watch: each stream gets the
// current snapshot at once, then every changed one, and an empty message (a
// heartbeat) whenever it has heard nothing for `heartbeatMs`, so the filter
// can tell a quiet fleet from a dead aggregator. A snapshot is encoded once
// and the same bytes go to every stream. Envoys that share their requests in
// flight (Hello.shares_inflight) report them in further Hellos; every
// `shareIntervalMs` each is sent what changed of the others' sum
// (peer-load.ts), and a stream's end takes its Envoy's counts out at once.
// The same Hellos and rounds carry the Envoys' prefix placements
// (peer-prefix.ts), queue boards (peer-queues.ts) and health verdicts
// (peer-health.ts).
import * as grpc from "@grpc/grpc-js";
import { formatHostPort } from "../config.js";
import { encodeSnapshot, snapshotServiceDefinition, type HelloMsg } from "../proto.js";
import { PeerLoadMerge } from "./peer-load.js";
import { PeerPrefixMerge } from "./peer-prefix.js";
import { PeerHealthMerge } from "./peer-health.js";
import { PeerQueueMerge } from "./peer-queues.js";
import { capStreams, describePeer, SERVER_OPTIONS } from "./link-security.js";
import type { Snapshot } from "./snapshot.js";
import type { StandbyGate } from "./standby.js";

/** Streams are written encoded snapshots (Buffers), so the service's serializer passes them through. */
type WatchCall = grpc.ServerDuplexStream<HelloMsg, Buffer>;
const watchDefinition: grpc.ServiceDefinition = {
  ...snapshotServiceDefinition,
  Watch: { ...snapshotServiceDefinition.Watch, responseSerialize: (bytes: Buffer) => bytes },
};

/** Per stream: only the newest snapshot matters, so a slow reader gets at most one queued. */
interface Subscriber {
  call: WatchCall;
  blocked: boolean;
  pending: Buffer | null;
  lastSentMs: number;
  /** The place among the sharing replicas it was last sent ("index/count"). */
  toldPlace: string;
}

export interface SnapshotServer {
  readonly port: number;
  /** Open Watch streams. */
  streams(): number;
  /** Streams (Watch and the other services') refused by the cap so far. */
  refusedStreams(): number;
  /** Messages written to streams so far. */
  pushed(): number;
  /** Bytes of in-flight reports taken and of fan-outs sent so far (payloads, as encoded in the messages). */
  sharedBytes(): { reported: number; fannedOut: number };
  /** The same for prefix records, and the records the fan-outs' cap left out. */
  sharedPrefixes(): { reported: number; fannedOut: number; dropped: number };
  /** Bytes of queue-board reports taken and fan-outs sent so far. */
  sharedQueues(): { reported: number; fannedOut: number };
  /** Bytes of ejection reports taken and fan-outs sent so far. */
  sharedEjections(): { reported: number; fannedOut: number };
  /** Sends `snapshot` to every stream; returns its encoded size in bytes. */
  publish(snapshot: Snapshot): number;
  /** Ends every stream with OK and stops the server. */
  close(): Promise<void>;
}

export interface SnapshotServerOptions {
  host: string;
  port: number;
  current: () => Snapshot;
  log: (line: string) => void;
  /** More services on the same port (Envoy's ADS). */
  services?: ReadonlyArray<{ definition: grpc.ServiceDefinition; implementation: grpc.UntypedServiceImplementation }>;
  /** Longest silence on a stream before a heartbeat; default 1000 ms. */
  heartbeatMs?: number;
  /** Default: no TLS (link-security.ts makes mutual TLS ones). */
  credentials?: grpc.ServerCredentials;
  /** Streams of every service open at once; past it a new one is refused with RESOURCE_EXHAUSTED. Default: no cap. */
  maxStreams?: number;
  /** Called with the method name of each refused stream. */
  onStreamRefused?: (method: string) => void;
  /** With several aggregators: streams only while this one leads, and the health service Envoy checks that by. */
  standby?: StandbyGate;
  /** How often the Envoys sharing their in flight are sent the others' changes; default 20 ms; 0: no sharing. */
  shareIntervalMs?: number;
  /** Largest prefix records payload of one fan-out, bytes (the oldest records past it are dropped); default peer-prefix.ts's. */
  peerPrefixCapBytes?: number;
}

const SHUTDOWN_GRACE_MS = 1000;
export const DEFAULT_HEARTBEAT_MS = 1000;
export const DEFAULT_SHARE_INTERVAL_MS = 20;
// An empty Snapshot (version 0, which no real snapshot has) is the heartbeat.
const HEARTBEAT = encodeSnapshot({} as Snapshot);

export async function startSnapshotServer(opts: SnapshotServerOptions): Promise<SnapshotServer> {
  const subscribers = new Set<Subscriber>();
  const peers = new PeerLoadMerge();
  const queues = new PeerQueueMerge();
  const ejections = new PeerHealthMerge();
  /** The sharing streams by the merge's member key. */
  const sharing = new Map<string, Subscriber>();
  const shareMs = opts.shareIntervalMs ?? DEFAULT_SHARE_INTERVAL_MS;
  const shared = { reported: 0, fannedOut: 0 };
  const prefixes = new PeerPrefixMerge(opts.peerPrefixCapBytes);
  const sharedPrefix = { reported: 0, fannedOut: 0 };
  const sharedQueues = { reported: 0, fannedOut: 0 };
  const sharedEjections = { reported: 0, fannedOut: 0 };
  let pushedCount = 0;
  let nextStreamId = 1;

  // The encoding of the snapshot current() returned last, for streams that open later.
  let encoded: { snapshot: Snapshot; bytes: Buffer } | null = null;
  const encode = (snapshot: Snapshot): Buffer => {
    if (encoded?.snapshot !== snapshot) encoded = { snapshot, bytes: encodeSnapshot(snapshot) };
    return encoded.bytes;
  };

  function send(sub: Subscriber, bytes: Buffer): void {
    if (sub.blocked) {
      sub.pending = bytes;
      return;
    }
    pushedCount++;
    sub.lastSentMs = Date.now();
    if (!sub.call.write(bytes)) sub.blocked = true;
  }

  function watch(call: WatchCall): void {
    const id = nextStreamId++;
    const peer = describePeer(call);
    const sub: Subscriber = { call, blocked: false, pending: null, lastSentMs: 0, toldPlace: "" };
    subscribers.add(sub);
    opts.log(`stream ${id} opened from ${peer} (${subscribers.size} open)`);

    let gone = false;
    const forget = (why: string) => {
      if (gone) return;
      gone = true;
      subscribers.delete(sub);
      // A gone Envoy's requests must not stay counted: the next round tells the others.
      sharing.delete(String(id));
      peers.forget(String(id));
      prefixes.forget(String(id));
      queues.forget(String(id));
      ejections.forget(String(id));
      opts.log(`stream ${id} ${why} (${subscribers.size} open)`);
    };
    // Envoy may open duplicate streams and drop them: forget on every way out.
    call.on("cancelled", () => forget("cancelled"));
    call.on("error", (err: Error) => forget(`failed: ${err.message}`));
    call.on("close", () => forget("closed"));
    call.on("drain", () => {
      sub.blocked = false;
      const pending = sub.pending;
      sub.pending = null;
      if (pending) send(sub, pending);
    });
    call.on("data", (hello: HelloMsg) => {
      const key = String(id);
      if (!sharing.has(key)) {
        opts.log(`stream ${id} hello client=${JSON.stringify(hello.client)} haveVersion=${hello.haveVersion}${hello.sharesInflight ? " shares in flight" : ""}`);
        // With sharing off here, an Envoy that offers to share is served snapshots only.
        if (!hello.sharesInflight || gone || shareMs === 0) return;
        sharing.set(key, sub);
      }
      const report = hello.inflight ?? new Uint8Array(0);
      try {
        peers.take(key, report);
        shared.reported += report.byteLength;
        const records = hello.prefixRecords ?? new Uint8Array(0);
        prefixes.take(key, records);
        sharedPrefix.reported += records.byteLength;
        // Absent decodes as empty; a report is never empty (its count comes first).
        if (hello.queues && hello.queues.byteLength > 0) {
          queues.take(key, hello.queues);
          sharedQueues.reported += hello.queues.byteLength;
        }
        if (hello.ejections && hello.ejections.byteLength > 0) {
          ejections.take(key, hello.ejections);
          sharedEjections.reported += hello.ejections.byteLength;
        }
      } catch (err) {
        // The stream's figures can no longer be trusted: it ends, and the Envoy starts a new one whole.
        opts.log(`stream ${id}: ${(err as Error).message}; closing it`);
        call.destroy(err as Error);
      }
    });
    // The client may half-close after its Hello (proxy_grpc_close does that);
    // the stream stays open for pushes, so 'end' is deliberately not handled.

    send(sub, encode(opts.current()));
  }

  const server = new grpc.Server(SERVER_OPTIONS);
  const capped = capStreams([{ definition: watchDefinition, implementation: { Watch: watch } }, ...(opts.services ?? [])], {
    max: opts.maxStreams ?? Number.MAX_SAFE_INTEGER,
    log: opts.log,
    onRefused: opts.onStreamRefused,
  });
  const services = opts.standby ? [...opts.standby.wrap(capped.services), opts.standby.health] : capped.services;
  for (const s of services) server.addService(s.definition, s.implementation);

  const port = await new Promise<number>((resolve, reject) => {
    server.bindAsync(formatHostPort(opts.host, opts.port), opts.credentials ?? grpc.ServerCredentials.createInsecure(), (err, bound) =>
      err ? reject(err) : resolve(bound),
    );
  });

  const heartbeatMs = opts.heartbeatMs ?? DEFAULT_HEARTBEAT_MS;
  // Checked at a quarter of the interval, so no stream stays silent much longer than heartbeatMs.
  const heartbeat = setInterval(() => {
    const due = Date.now() - heartbeatMs;
    for (const sub of subscribers) if (!sub.blocked && sub.lastSentMs <= due) send(sub, HEARTBEAT);
  }, Math.max(10, Math.floor(heartbeatMs / 4)));
  heartbeat.unref();

  const shareRound = shareMs > 0 ? setInterval(() => {
    if (sharing.size === 0) return;
    const prefixRound = prefixes.round();
    for (const [key, bytes] of peers.round()) {
      const sub = sharing.get(key);
      const place = peers.placeOf(key);
      if (!sub || !place) continue;
      const told = `${place.index}/${place.count}`;
      const records = prefixRound.get(key) ?? new Uint8Array(0);
      const peerQueues = queues.fanOut(key);
      const peerEjections = ejections.fanOut(key);
      if (bytes.byteLength === 0 && records.byteLength === 0 && told === sub.toldPlace && !peerQueues && !peerEjections) continue;
      sub.toldPlace = told;
      shared.fannedOut += bytes.byteLength;
      sharedQueues.fannedOut += peerQueues?.byteLength ?? 0;
      sharedEjections.fannedOut += peerEjections?.byteLength ?? 0;
      sharedPrefix.fannedOut += records.byteLength;
      const fanOut = {
        peerInflight: bytes, replicaIndex: place.index, replicaCount: place.count, peerQueues, peerEjections,
        ...(records.byteLength > 0 ? { peerPrefixRecords: records } : {}),
      };
      // A fan-out carries changes: unlike a snapshot it may not be replaced by a newer one while the stream is blocked.
      sub.call.write(encodeSnapshot(fanOut as unknown as Snapshot));
      sub.lastSentMs = Date.now();
    }
  }, shareMs) : undefined;
  shareRound?.unref();

  return {
    port,
    streams: () => subscribers.size,
    refusedStreams: () => capped.gate.refused(),
    pushed: () => pushedCount,
    sharedBytes: () => ({ ...shared }),
    sharedPrefixes: () => ({ ...sharedPrefix, dropped: prefixes.dropped }),
    sharedQueues: () => ({ ...sharedQueues }),
    sharedEjections: () => ({ ...sharedEjections }),
    publish(snapshot) {
      const bytes = encode(snapshot);
      for (const sub of subscribers) send(sub, bytes);
      return bytes.length;
    },
    close() {
      clearInterval(heartbeat);
      clearInterval(shareRound);
      for (const sub of subscribers) sub.call.end();
      subscribers.clear();
      return new Promise<void>((resolve) => {
        const force = setTimeout(() => {
          server.forceShutdown();
          resolve();
        }, SHUTDOWN_GRACE_MS);
        server.tryShutdown(() => {
          clearTimeout(force);
          resolve();
        });
      });
    },
  };
}
