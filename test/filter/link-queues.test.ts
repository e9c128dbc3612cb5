// The link's share of queue boards, in build/filter.wasm on the proxy-wasm
// emulator (gateway/peer-queues.ts): it reports what its workers hold in a
// Hello on its share tick, puts a fan-out's summaries of the other Envoys on
// the board beside its own and renews them there, takes them off when its
// stream ends, and drops its stream on summaries that do not decode.
import { describe, expect, it } from "vitest";
import { decodeBoard, PeerQueueMerge } from "../../host/aggregator/peer-queues.js";
import { encodeSnapshot, snapshotServiceDefinition, type HelloMsg, type SnapshotMsg } from "../../host/proto.js";
import { endpoint, pool, snapshot } from "../../testing/fixtures/snapshot-builders.js";
import { EmulatedGateway } from "../helpers/emulated-gateway.js";

const START_MS = 1_750_000_000_000;
const QUEUES_KEY = "llm_gateway.queues";
const RECORD = 72;
const watch = snapshotServiceDefinition.Watch;

function envoy(): EmulatedGateway {
  const gw = new EmulatedGateway({ startMs: START_MS, workers: 1 });
  gw.publish(snapshot([pool("p", "llama", [endpoint("10.0.0.1:80")])]));
  gw.host.tick();
  return gw;
}

/** A board of summaries by `writer`, each holding one Standard request for pool hash 7, updated at `updatedMs`. */
function board(updatedMs: number, ...writers: number[]): Uint8Array {
  const out = new Uint8Array(4 + writers.length * RECORD);
  const view = new DataView(out.buffer);
  view.setUint32(0, writers.length, true);
  writers.forEach((w, i) => {
    const at = 4 + i * RECORD;
    view.setUint32(at, w, true);
    view.setBigUint64(at + 8, 7n, true);
    view.setBigUint64(at + 16, BigInt(updatedMs), true);
    view.setUint32(at + 36, 1, true);
    for (let r = 0; r < 3; r++) view.setBigUint64(at + 48 + r * 8, r === 1 ? 1234n : 0xffffffffffffffffn, true);
  });
  return out;
}

const vmId = (gw: EmulatedGateway) => gw.link.vm.vmId;
const boardOf = (gw: EmulatedGateway) => gw.host.sharedData.get(vmId(gw), QUEUES_KEY)?.value ?? new Uint8Array(0);
const writersOn = (gw: EmulatedGateway) => decodeBoard(boardOf(gw), "board").map((r) => new DataView(r.buffer).getUint32(0, true));
const updatedOn = (gw: EmulatedGateway) => decodeBoard(boardOf(gw), "board").map((r) => Number(new DataView(r.buffer).getBigUint64(16, true)));

/** The queue reports of the Hellos the link sent since `from`. */
function reported(gw: EmulatedGateway, from: number): Uint8Array[] {
  return gw.aggregatorStream().sent.slice(from).flatMap((m) => {
    const hello = watch.requestDeserialize(Buffer.from(m)) as HelloMsg;
    return hello.queues?.byteLength ? [new Uint8Array(hello.queues)] : [];
  });
}

function shareTick(gw: EmulatedGateway, ms = 25): void {
  gw.host.advance(ms);
  gw.host.tick();
}

describe("the link sharing queue boards with other replicas", () => {
  it("reports what its workers hold, keeps the others' summaries on the board while its stream lasts, and takes them off after", () => {
    const gw = envoy();
    const from = gw.aggregatorStream().sent.length;
    // A worker of this Envoy holds a request (its id 1, as worker ids start).
    gw.host.sharedData.set(vmId(gw), QUEUES_KEY, board(START_MS, 1), 0);
    shareTick(gw);
    const reports = reported(gw, from);
    expect(reports.length).toBeGreaterThan(0);
    expect(decodeBoard(reports.at(-1)!, "report").map((r) => new DataView(r.buffer).getUint32(0, true))).toEqual([1]);
    // Nothing changed: no further report.
    const sent = gw.aggregatorStream().sent.length;
    shareTick(gw);
    expect(reported(gw, sent)).toEqual([]);

    // The aggregator relays another Envoy's summary (renumbered as its merge does).
    const merge = new PeerQueueMerge();
    merge.take("other", board(0, 3));
    merge.take("this", reports.at(-1)!);
    const fanOut = merge.fanOut("this")!;
    gw.link.vm.grpcReceive(gw.aggregatorStream().token, encodeSnapshot({ peerQueues: fanOut, replicaIndex: 1, replicaCount: 2 } as unknown as SnapshotMsg));
    expect(writersOn(gw)).toEqual([1, 0x40000003]);
    // It stays while the stream lasts, renewed before the board's 1 s would drop it; this Envoy's own is never reported back.
    const stamped = updatedOn(gw)[1];
    const before = gw.aggregatorStream().sent.length;
    for (let i = 0; i < 60; i++) shareTick(gw);
    expect(writersOn(gw)).toEqual([1, 0x40000003]);
    expect(updatedOn(gw)[1]).toBeGreaterThan(stamped + 1000);
    expect(reported(gw, before)).toEqual([]);

    // The stream ends: the other Envoy's summary leaves, this Envoy's own stays.
    gw.link.vm.grpcClose(gw.aggregatorStream().token, 14);
    expect(writersOn(gw)).toEqual([1]);
  });

  it("drops its stream on queue summaries that do not decode", () => {
    const gw = envoy();
    const stream = gw.aggregatorStream();
    gw.link.vm.grpcReceive(stream.token, encodeSnapshot({ peerQueues: Uint8Array.from([1, 2, 3]), replicaIndex: 0, replicaCount: 2 } as unknown as SnapshotMsg));
    expect(stream.state).not.toBe("open");
  });
});
