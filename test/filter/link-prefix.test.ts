// The link's share of prefix placements, in build/filter.wasm on the
// proxy-wasm emulator (gateway/peer-prefix.ts): it reports its workers'
// prefix-log records in a Hello on its share tick, appends a fan-out's
// records from the other replicas to the log so its workers route those
// prefixes where the others placed them, never reports them back, and
// drops its stream on records that do not decode.
import { describe, expect, it } from "vitest";
import { PeerPrefixMerge, splitRecords } from "../../host/aggregator/peer-prefix.js";
import { encodeSnapshot, snapshotServiceDefinition, type HelloMsg, type SnapshotMsg } from "../../host/proto.js";
import { endpoint, pool, snapshot } from "../../testing/fixtures/snapshot-builders.js";
import { SYSTEM } from "../../testing/fixtures/workers.js";
import { EmulatedGateway } from "../helpers/emulated-gateway.js";

const START_MS = 1_750_000_000_000;
const PODS = ["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80", "10.0.0.4:80"];
const FLEET = snapshot([pool("p", "llama", PODS.map((a) => endpoint(a)), { queue: 0, kvCache: 0, running: 0, lora: 0, prefix: 1 })]);
const watch = snapshotServiceDefinition.Watch;

const chat = (topic: string, user: string) =>
  JSON.stringify({ model: "llama", messages: [{ role: "system", content: `${topic}: ${SYSTEM}` }, { role: "user", content: user }] });

/** An Envoy of two workers holding FLEET; `startMs` apart, so replicas break ties apart. */
function envoy(startMs: number): EmulatedGateway {
  const gw = new EmulatedGateway({ startMs, workers: 2 });
  gw.publish(FLEET);
  gw.host.tick();
  return gw;
}

function route(gw: EmulatedGateway, body: string, worker: number): string {
  const s = gw.request({ headers: { ":method": "POST", ":path": "/v1/chat/completions", "content-length": String(body.length) }, body }, worker);
  return s.requestHeaders.get("x-gateway-destination-endpoint")?.split(",")[0] ?? "";
}

/** The prefix records of the Hellos the link sent since `from` (the stream's messages, by index). */
function reported(gw: EmulatedGateway, from: number): Uint8Array[] {
  return gw.aggregatorStream().sent.slice(from).flatMap((m) => {
    const hello = watch.requestDeserialize(Buffer.from(m)) as HelloMsg;
    return hello.prefixRecords?.byteLength ? splitRecords(hello.prefixRecords) : [];
  });
}

/** Time passes by a share interval: every worker ticks (sharing its records through the log), then the link. */
function shareTick(gw: EmulatedGateway): void {
  gw.host.advance(25);
  gw.host.tick();
}

describe("the link sharing prefix placements with other replicas", () => {
  it("reports its workers' records, applies the others', and never reports those back", () => {
    const a = envoy(START_MS);
    const b = envoy(START_MS + 7_777);
    const topics = ["billing", "shipping", "returns", "accounts"];
    const sentBefore = a.aggregatorStream().sent.length;
    const placed = topics.map((t, i) => route(a, chat(t, "first"), i % 2));
    shareTick(a);
    shareTick(a);
    const records = reported(a, sentBefore);
    expect(records).toHaveLength(4);

    // The aggregator's merge hands them to b (its first Hello joined it), in a fan-out like the push server's.
    const merge = new PeerPrefixMerge();
    merge.take("a", Buffer.concat(records));
    merge.take("b", new Uint8Array(0));
    const fanOut = merge.round().get("b")!;
    const bSent = b.aggregatorStream().sent.length;
    b.link.vm.grpcReceive(b.aggregatorStream().token, encodeSnapshot({ peerPrefixRecords: fanOut, replicaIndex: 1, replicaCount: 2 } as unknown as SnapshotMsg));
    shareTick(b);
    // Both of b's workers send each prefix where a placed it, though b never routed any of them.
    expect(topics.flatMap((t) => [0, 1].map((w) => route(b, chat(t, `again ${w}`), w)))).toEqual(placed.flatMap((p) => [p, p]));
    shareTick(b);
    shareTick(b);
    // b reports its own eight placements, not a's four it appended.
    expect(reported(b, bSent)).toHaveLength(8);
  });

  it("drops its stream on a fan-out whose records do not decode", () => {
    const b = envoy(START_MS);
    const stream = b.aggregatorStream();
    b.link.vm.grpcReceive(stream.token, encodeSnapshot({ peerPrefixRecords: Uint8Array.from([1, 2, 3]), replicaIndex: 0, replicaCount: 2 } as unknown as SnapshotMsg));
    expect(stream.state).not.toBe("open");
    expect(b.link.vm.logs.at(-1)?.message).toMatch(/fan-out that does not decode/);
  });
});
