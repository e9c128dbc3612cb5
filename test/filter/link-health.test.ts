// The link's share of passive-health verdicts, in build/filter.wasm on the
// proxy-wasm emulator (gateway/peer-health.ts): it reports this Envoy's
// running ejections on its share tick, the workers avoid a pod another
// Envoy ejected until that ejection ends, nothing of the others' is
// reported back, a stream's end lifts them, and bad bytes drop the stream.
import { describe, expect, it } from "vitest";
import { decodeEjections, encodeEjections, PeerHealthMerge } from "../../host/aggregator/peer-health.js";
import { encodeSnapshot, snapshotServiceDefinition, type HelloMsg, type SnapshotMsg } from "../../host/proto.js";
import { endpoint, pool, snapshot } from "../../testing/fixtures/snapshot-builders.js";
import { EmulatedGateway } from "../helpers/emulated-gateway.js";

const START_MS = 1_750_000_000_000;
const A = "10.0.0.1:80";
const B = "10.0.0.2:80";
const watch = snapshotServiceDefinition.Watch;

function envoy(): EmulatedGateway {
  const gw = new EmulatedGateway({ startMs: START_MS, workers: 1 });
  gw.publish(snapshot([pool("p", "llama", [endpoint(A), endpoint(B)], { queue: 0, kvCache: 0, running: 1, lora: 0, prefix: 0 })]));
  gw.host.tick();
  return gw;
}

function route(gw: EmulatedGateway): string {
  const body = JSON.stringify({ model: "llama", messages: [{ role: "user", content: "hi" }] });
  const s = gw.request({ headers: { ":method": "POST", ":path": "/v1/chat/completions", "content-length": String(body.length) }, body });
  return s.requestHeaders.get("x-gateway-destination-endpoint")?.split(",")[0] ?? "";
}

/** A ledger as the workers write it (core/fleet/health.ts): one pod with `failures`, ejected until `untilMs`. */
function ledger(address: string, failures: number, untilMs: number): Uint8Array {
  const name = Buffer.from(address);
  const out = new Uint8Array(4 + 4 + name.byteLength + 12);
  const view = new DataView(out.buffer);
  view.setUint32(0, 1, true);
  view.setUint32(4, name.byteLength, true);
  out.set(name, 8);
  view.setUint32(8 + name.byteLength, failures, true);
  view.setBigUint64(12 + name.byteLength, BigInt(untilMs), true);
  return out;
}

function reported(gw: EmulatedGateway, from: number): Array<Array<[string, number]>> {
  return gw.aggregatorStream().sent.slice(from).flatMap((m) => {
    const hello = watch.requestDeserialize(Buffer.from(m)) as HelloMsg;
    return hello.ejections?.byteLength ? [decodeEjections(new Uint8Array(hello.ejections))] : [];
  });
}

const fanOut = (gw: EmulatedGateway, ejections: Uint8Array) =>
  gw.link.vm.grpcReceive(gw.aggregatorStream().token, encodeSnapshot({ peerEjections: ejections, replicaIndex: 0, replicaCount: 2 } as unknown as SnapshotMsg));

function tick(gw: EmulatedGateway, ms = 25): void {
  gw.host.advance(ms);
  gw.host.tick();
}

describe("the link sharing health verdicts with other replicas", () => {
  it("reports this Envoy's running ejections, once per change", () => {
    const gw = envoy();
    const from = gw.aggregatorStream().sent.length;
    gw.host.sharedData.set(gw.link.vm.vmId, "llm_gateway.health", ledger(A, 3, gw.host.nowMs() + 5_000), 0);
    tick(gw);
    tick(gw);
    const reports = reported(gw, from);
    expect(reports.at(-1)).toHaveLength(1);
    expect(reports.at(-1)![0][0]).toBe(A);
    expect(reports.at(-1)![0][1]).toBeGreaterThan(4_900);
    expect(reports.filter((r) => r.length > 0)).toHaveLength(1);
    // It runs out: the next report says none.
    tick(gw, 5_100);
    expect(reported(gw, from).at(-1)).toEqual([]);
  });

  it("avoids a pod another Envoy ejected until that ejection ends, without reporting it back, and lifts it when the stream ends", () => {
    const gw = envoy();
    const picks = (n: number) => new Set(Array.from({ length: n }, () => route(gw)));
    // Both usable: this fleet's picks go to A (the first of two alike).
    expect(picks(5).has(A)).toBe(true);
    const from = gw.aggregatorStream().sent.length;
    fanOut(gw, encodeEjections([[A, 2_000]]));
    tick(gw);
    expect(picks(20)).toEqual(new Set([B]));
    tick(gw);
    expect(reported(gw, from).filter((r) => r.length > 0)).toEqual([]);
    // Its end passes: A is back.
    tick(gw, 2_000);
    expect(picks(5).has(A)).toBe(true);
    // Ejected again, then the stream ends: lifted at once.
    fanOut(gw, encodeEjections([[A, 60_000]]));
    tick(gw);
    expect(picks(20)).toEqual(new Set([B]));
    gw.link.vm.grpcClose(gw.aggregatorStream().token, 14);
    tick(gw);
    expect(picks(5).has(A)).toBe(true);
  });

  it("drops its stream on ejections that do not decode", () => {
    const gw = envoy();
    const stream = gw.aggregatorStream();
    fanOut(gw, Uint8Array.from([1, 0, 0, 0, 9]));
    expect(stream.state).not.toBe("open");
  });
});

describe("the aggregator's merge of the Envoys' ejections", () => {
  it("sends each Envoy the others' running ejections, the later end of two, only when one changed, and forgets a gone Envoy's", () => {
    let now = 1_000;
    const m = new PeerHealthMerge(() => now);
    m.take("a", encodeEjections([[A, 5_000]]));
    m.take("b", encodeEjections([[A, 8_000], [B, 1_000]]));
    m.take("c", encodeEjections([]));
    expect(decodeEjections(m.fanOut("c")!)).toEqual([[A, 8_000], [B, 1_000]]);
    expect(decodeEjections(m.fanOut("a")!)).toEqual([[A, 8_000], [B, 1_000]]);
    expect(m.fanOut("c")).toBeUndefined();
    now += 2_000;
    m.forget("b");
    expect(decodeEjections(m.fanOut("c")!)).toEqual([[A, 3_000]]);
  });

  it("refuses bytes that are not ejections, naming the fault", () => {
    const m = new PeerHealthMerge();
    expect(() => m.take("a", Uint8Array.from([1, 0]))).toThrow(/no count/);
    expect(() => m.take("a", Uint8Array.from([1, 0, 0, 0, 9]))).toThrow(/truncated/);
    expect(() => m.take("a", encodeEjections([[A, 1]]).subarray(0, 10))).toThrow(/bad address length|truncated/);
  });
});
