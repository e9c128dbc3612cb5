// The snapshot server's share rounds carry queue boards and health verdicts
// between Envoys over real gRPC (host/aggregator/push.ts with peer-queues.ts
// and peer-health.ts): what one sharing stream reports reaches the others'
// fan-outs, with each stream's place; a gone stream's share is withdrawn;
// a report that is not a board closes its stream.
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

async function server(): Promise<SnapshotServer> {
  const s = await startSnapshotServer({
    host: "127.0.0.1", port: 0, log: () => {}, shareIntervalMs: 10,
    current: () => ({ version: 1, models: [], pools: [], generatedUnixMs: 0 }),
  });
  cleanups.push(() => s.close());
  return s;
}

/** A sharing Envoy's stream and the fan-outs it was sent. */
function envoy(port: number) {
  const conn = new SnapshotService(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  const call = conn["Watch"]() as grpc.ClientDuplexStream<HelloMsg, SnapshotMsg>;
  const fanOuts: SnapshotMsg[] = [];
  call.on("data", (s: SnapshotMsg) => !s.version && fanOuts.push(s));
  call.on("error", () => {});
  const close = () => {
    call.cancel();
    conn.close();
  };
  cleanups.push(close);
  // As the link's first Hello: nothing held, nothing ejected (an Envoy that sends neither is sent neither).
  call.write({ client: "envoy", haveVersion: 0, sharesInflight: true, queues: Buffer.alloc(4), ejections: Buffer.alloc(4) });
  return { call, fanOuts, close };
}

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
