// The snapshot server's share rounds between Envoys over real gRPC
// (host/aggregator/push.ts with peer-prefix.ts, peer-queues.ts and
// peer-health.ts): a sharing stream's prefix records, queue board and
// ejections reach the others' fan-outs (records within the cap, the bytes
// counted), each stream numbered; a gone stream's share is withdrawn; a
// report that does not decode closes its stream.
import * as grpc from "@grpc/grpc-js";
import { afterEach, expect, it } from "vitest";
import { decodeEjections, encodeEjections } from "../../host/aggregator/peer-health.js";
import { decodeBoard } from "../../host/aggregator/peer-queues.js";
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

/** A sharing Envoy's stream, the fan-outs it was sent and the prefix records in them. */
function envoy(port: number) {
  const conn = new SnapshotService(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  const call = conn["Watch"]() as grpc.ClientDuplexStream<HelloMsg, SnapshotMsg>;
  const fanOuts: SnapshotMsg[] = [];
  const records: Buffer[] = [];
  call.on("data", (s: SnapshotMsg) => {
    if (s.version) return;
    fanOuts.push(s);
    if (s.peerPrefixRecords?.byteLength) records.push(Buffer.from(s.peerPrefixRecords));
  });
  call.on("error", () => {});
  const close = () => {
    call.cancel();
    conn.close();
  };
  cleanups.push(close);
  // As the link's first Hello: nothing held, nothing ejected (an Envoy that sends neither is sent neither).
  call.write({ client: "envoy", haveVersion: 0, sharesInflight: true, queues: Buffer.alloc(4), ejections: Buffer.alloc(4) });
  return { call, fanOuts, records, close };
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

/** A board of one summary by worker `writer`. */
function board(writer: number): Buffer {
  const out = Buffer.alloc(4 + 72);
  out.writeUInt32LE(1, 0);
  out.writeUInt32LE(writer, 4);
  return out;
}

const lastQueues = (fanOuts: SnapshotMsg[]) => fanOuts.filter((f) => f.peerQueues?.byteLength).at(-1)?.peerQueues;
const lastEjections = (fanOuts: SnapshotMsg[]) => fanOuts.filter((f) => f.peerEjections?.byteLength).at(-1)?.peerEjections;

it("relays one Envoy's queue board and ejections to the other, each numbered, and withdraws them when its stream ends", async () => {
  const s = await server();
  const a = envoy(s.port);
  await waitFor("a sharing", () => s.streams() === 1);
  const b = envoy(s.port);
  await waitFor("b sharing", () => s.streams() === 2);
  a.call.write({ client: "envoy", haveVersion: 0, queues: board(1), ejections: Buffer.from(encodeEjections([["10.0.0.9:80", 5_000]])) });
  await waitFor("b told of a's queue and ejection", () => {
    const q = lastQueues(b.fanOuts);
    const e = lastEjections(b.fanOuts);
    return q !== undefined && decodeBoard(new Uint8Array(q), "q").length === 1 && e !== undefined && decodeEjections(new Uint8Array(e)).length === 1;
  });
  const summary = decodeBoard(new Uint8Array(lastQueues(b.fanOuts)!), "q")[0];
  expect(new DataView(summary.buffer).getUint32(0, true) >>> 30).toBe(1);
  const [[address, left]] = decodeEjections(new Uint8Array(lastEjections(b.fanOuts)!));
  expect(address).toBe("10.0.0.9:80");
  expect(left).toBeLessThanOrEqual(5_000);
  expect(left).toBeGreaterThan(3_000);
  expect(b.fanOuts.at(-1)).toMatchObject({ replicaCount: 2 });
  // a is never sent its own.
  expect(a.fanOuts.every((f) => !f.peerQueues?.byteLength || decodeBoard(new Uint8Array(f.peerQueues), "q").length === 0)).toBe(true);

  a.close();
  await waitFor("b told a's share is gone", () => {
    const last = b.fanOuts.at(-1)!;
    return last.peerQueues?.byteLength === 4 && last.peerEjections?.byteLength === 4;
  });
});

it("closes a stream whose queue report is not a board", async () => {
  const s = await server();
  const a = envoy(s.port);
  await waitFor("the stream open", () => s.streams() === 1);
  a.call.write({ client: "envoy", haveVersion: 0, queues: Buffer.from([1, 2, 3]) });
  await waitFor("the stream dropped", () => s.streams() === 0);
});
