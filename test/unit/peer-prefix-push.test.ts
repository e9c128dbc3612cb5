// The snapshot server's share rounds carry prefix records between Envoys
// over real gRPC (host/aggregator/push.ts with peer-prefix.ts): a sharing
// stream's records reach the others' fan-outs, within the cap, with the
// bytes counted; a report that is not records closes its stream.
import * as grpc from "@grpc/grpc-js";
import { afterEach, expect, it } from "vitest";
import { startSnapshotServer, type SnapshotServer } from "../../host/aggregator/push.js";
import { snapshotServiceDefinition, type HelloMsg, type SnapshotMsg } from "../../host/proto.js";
import { waitFor } from "../helpers/stack.js";

const SnapshotService = grpc.makeGenericClientConstructor(snapshotServiceDefinition, "SnapshotService");
const cleanups: Array<() => void | Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function server(capBytes?: number): Promise<SnapshotServer> {
  const s = await startSnapshotServer({
    host: "127.0.0.1", port: 0, log: () => {}, shareIntervalMs: 10, peerPrefixCapBytes: capBytes,
    current: () => ({ version: 1, models: [], pools: [], generatedUnixMs: 0 }),
  });
  cleanups.push(() => s.close());
  return s;
}

/** A sharing Envoy's stream and the prefix records it was sent in fan-outs. */
function envoy(port: number) {
  const conn = new SnapshotService(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  const call = conn["Watch"]() as grpc.ClientDuplexStream<HelloMsg, SnapshotMsg>;
  const records: Buffer[] = [];
  call.on("data", (s: SnapshotMsg) => s.peerPrefixRecords?.byteLength && records.push(Buffer.from(s.peerPrefixRecords)));
  call.on("error", () => {});
  cleanups.push(() => {
    call.cancel();
    conn.close();
  });
  call.write({ client: "envoy", haveVersion: 0, sharesInflight: true });
  return { call, records };
}

/** One record: u64 endpoint, varint new blocks, varint key count, u64 keys. */
function record(endpointByte: number, keys: number): Buffer {
  return Buffer.from([endpointByte, 0, 0, 0, 0, 0, 0, 0, 1, keys, ...Array.from({ length: keys * 8 }, (_, i) => i & 0xff)]);
}

it("fans a sharing Envoy's records out to the other sharing Envoys, within the cap, and counts the bytes", async () => {
  const s = await server(2 * record(1, 10).byteLength);
  const a = envoy(s.port);
  const b = envoy(s.port);
  await waitFor("both streams sharing", () => s.streams() === 2);
  // Both Hellos in: a round later both are members (the in-flight merge has them too).
  await new Promise<void>((resolve) => a.call.write({ client: "envoy", haveVersion: 0, prefixRecords: Buffer.concat([record(1, 10), record(2, 10), record(3, 10)]) }, resolve));
  await waitFor("b sent a's records", () => b.records.length > 0);
  // The cap keeps the newest two of the round.
  expect(Buffer.concat(b.records)).toEqual(Buffer.concat([record(2, 10), record(3, 10)]));
  expect(a.records).toEqual([]);
  expect(s.sharedPrefixes()).toEqual({ reported: 270, fannedOut: 180, dropped: 1 });
});

it("closes a stream whose report is not prefix records", async () => {
  const s = await server();
  const a = envoy(s.port);
  await waitFor("the stream open", () => s.streams() === 1);
  a.call.write({ client: "envoy", haveVersion: 0, prefixRecords: Buffer.from([1, 2, 3]) });
  // The server ends its side at once (the in-flight reports' way); the Envoy then starts a new stream whole.
  await waitFor("the stream dropped", () => s.streams() === 0);
});
