// The scale benchmark's gRPC Watch client, standing in for Envoy: counts
// snapshots and their size, and for every endpoint whose queue marker moved,
// how long ago its pod served that page (pods.ts): the delay from a scrape to
// the snapshot carrying it reaching a client.
import * as grpc from "@grpc/grpc-js";
import { decodeSnapshot, snapshotServiceDefinition, type SnapshotMsg } from "../../host/proto.js";
import { preciseNow, type FakePods } from "./pods.js";

interface Received {
  bytes: number;
  snapshot: SnapshotMsg;
}

// The service as a client that also sees each message's encoded size.
const definition: grpc.ServiceDefinition = {
  ...snapshotServiceDefinition,
  Watch: { ...snapshotServiceDefinition.Watch, responseDeserialize: (bytes: Buffer): Received => ({ bytes: bytes.length, snapshot: decodeSnapshot(bytes) }) },
};
const SnapshotService = grpc.makeGenericClientConstructor(definition, "SnapshotService");

export interface WatchCounts {
  /** Snapshots (heartbeats not counted). */
  pushes: number;
  /** Encoded bytes of the last snapshot. */
  lastBytes: number;
  /** Endpoints in the last snapshot. */
  lastEndpoints: number;
  /** Served-to-received delay of each endpoint update, ms. */
  delaysMs: number[];
}

export interface SnapshotWatch {
  counts: WatchCounts;
  /** Starts counting afresh (the measured window). */
  reset(): void;
  close(): void;
}

export function watchSnapshots(grpcPort: number, pods: FakePods): SnapshotWatch {
  const podOfPort = new Map(pods.ports.map((port, i) => [port, i]));
  const lastMarker = new Int32Array(pods.ports.length).fill(-1);
  const w: SnapshotWatch = {
    counts: { pushes: 0, lastBytes: 0, lastEndpoints: 0, delaysMs: [] },
    reset() {
      w.counts = { pushes: 0, lastBytes: 0, lastEndpoints: 0, delaysMs: [] };
    },
    close() {
      call.cancel();
      client.close();
    },
  };
  const client = new SnapshotService(`127.0.0.1:${grpcPort}`, grpc.credentials.createInsecure(), { "grpc.max_receive_message_length": 64 * 1024 * 1024 });
  const call = client["Watch"]() as grpc.ClientDuplexStream<unknown, Received>;
  call.on("data", ({ bytes, snapshot }: Received) => {
    const now = preciseNow();
    if (!snapshot.version) return; // a heartbeat
    const c = w.counts;
    c.pushes++;
    c.lastBytes = bytes;
    c.lastEndpoints = 0;
    for (const pool of snapshot.pools ?? []) {
      for (const e of pool.endpoints ?? []) {
        c.lastEndpoints++;
        const i = podOfPort.get(Number(e.address.slice(e.address.lastIndexOf(":") + 1)));
        if (i === undefined || e.waiting === lastMarker[i]) continue;
        lastMarker[i] = e.waiting;
        const servedAt = pods.servedAt(i, e.waiting);
        if (servedAt !== undefined) c.delaysMs.push(now - servedAt);
      }
    }
  });
  call.on("error", () => {}); // CANCELLED at close
  call.write({ client: "scale-bench", haveVersion: 0 });
  return w;
}
