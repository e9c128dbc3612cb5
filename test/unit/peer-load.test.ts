// In-flight counts shared between Envoy replicas through the control plane:
// the routing core's peers part and its link's reports and fan-outs (native
// build), and the aggregator's merge (host/aggregator/peer-load.ts).
import { beforeAll, describe, expect, it } from "vitest";
import { decodeReport, MAX_INFLIGHT_PER_POD, MAX_PODS_PER_ENVOY, PeerLoadMerge } from "../../host/aggregator/peer-load.js";
import { A, B, chat, endpoint, Workers } from "../../testing/fixtures/workers.js";
import { NativeRouter } from "../../testing/native/router.js";

/** A report as the link encodes it: u64 hash, varint count, prefilling, tokens. */
function report(...entries: Array<[bigint, number, number, number]>): Uint8Array {
  const bytes: number[] = [];
  const varint = (v: number) => {
    for (; v >= 0x80; v = Math.floor(v / 0x80)) bytes.push((v % 0x80) | 0x80);
    bytes.push(v);
  };
  for (const [hash, n, s, t] of entries) {
    for (let i = 0n; i < 64n; i += 8n) bytes.push(Number((hash >> i) & 0xffn));
    varint(n);
    varint(s);
    varint(t);
  }
  return Uint8Array.from(bytes);
}

/** A fan-out's entries: [id, hash if named, count, prefilling, tokens]. */
function fanOut(bytes: Uint8Array): Array<[number, bigint | null, number, number, number]> {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let at = 0;
  const varint = () => {
    let v = 0;
    for (let shift = 0; ; shift += 7) {
      const b = bytes[at++];
      v += (b & 0x7f) * 2 ** shift;
      if ((b & 0x80) === 0) return v;
    }
  };
  const out: Array<[number, bigint | null, number, number, number]> = [];
  while (at < bytes.byteLength) {
    const head = varint();
    let hash: bigint | null = null;
    if (head % 2 === 1) {
      hash = view.getBigUint64(at, true);
      at += 8;
    }
    out.push([Math.floor(head / 2), hash, varint(), varint(), varint()]);
  }
  return out;
}

describe("the aggregator's merge of the replicas' in flight", () => {
  it("sends each Envoy the sum of the others' figures, its first round whole, then only what changed", () => {
    const merge = new PeerLoadMerge();
    merge.take("a", report([1n, 3, 1, 500], [2n, 1, 0, 0]));
    merge.take("b", report([1n, 2, 0, 0]));
    merge.take("c", report());
    let round = merge.round();
    expect(fanOut(round.get("a")!)).toEqual([[0, 1n, 2, 0, 0]]);
    expect(fanOut(round.get("b")!).sort((x, y) => x[0] - y[0])).toEqual([[0, 1n, 3, 1, 500], [1, 2n, 1, 0, 0]]);
    expect(fanOut(round.get("c")!).sort((x, y) => x[0] - y[0])).toEqual([[0, 1n, 5, 1, 500], [1, 2n, 1, 0, 0]]);

    // a's request on pod 2 ends: only pod 2, to the others (a's own change is nothing new to a), by id alone.
    merge.take("a", report([2n, 0, 0, 0]));
    round = merge.round();
    expect(round.get("a")!.byteLength).toBe(0);
    expect(fanOut(round.get("b")!)).toEqual([[1, null, 0, 0, 0]]);
    expect(fanOut(round.get("c")!)).toEqual([[1, null, 0, 0, 0]]);

    // Nothing reported: nothing sent.
    round = merge.round();
    expect([...round.values()].map((b) => b.byteLength)).toEqual([0, 0, 0]);
  });

  it("forgets an Envoy whose stream ended: the others are told its counts are gone on the next round", () => {
    const merge = new PeerLoadMerge();
    merge.take("a", report([7n, 4, 2, 900]));
    merge.take("b", report([7n, 1, 0, 0]));
    merge.round();
    merge.forget("a");
    expect(merge.size).toBe(1);
    const round = merge.round();
    expect([...round.keys()]).toEqual(["b"]);
    expect(fanOut(round.get("b")!)).toEqual([[0, null, 0, 0, 0]]);
    // A new stream of the same Envoy starts from nothing and is sent the others' whole sum.
    merge.take("a", report());
    expect(fanOut(merge.round().get("a")!)).toEqual([[0, 7n, 1, 0, 0]]);
  });

  it("numbers the Envoys in the order they joined, and renumbers them when one leaves", () => {
    const merge = new PeerLoadMerge();
    for (const e of ["a", "b", "c"]) merge.take(e, report());
    expect(["a", "b", "c"].map((e) => merge.placeOf(e))).toEqual([{ index: 0, count: 3 }, { index: 1, count: 3 }, { index: 2, count: 3 }]);
    merge.forget("a");
    expect(merge.placeOf("a")).toBeUndefined();
    expect(["b", "c"].map((e) => merge.placeOf(e))).toEqual([{ index: 0, count: 2 }, { index: 1, count: 2 }]);
  });

  it("refuses a stream that names more pods than any fleet has, and applies none of that report", () => {
    const merge = new PeerLoadMerge();
    const many = (from: number, n: number) => report(...Array.from({ length: n }, (_, i): [bigint, number, number, number] => [BigInt(from + i + 1), 1, 0, 0]));
    merge.take("a", many(0, MAX_PODS_PER_ENVOY - 1));
    expect(() => merge.take("a", many(MAX_PODS_PER_ENVOY, 2))).toThrow(/more than 100000 pods/);
    merge.take("b", report());
    expect(fanOut(merge.round().get("b")!).length).toBe(MAX_PODS_PER_ENVOY - 1);
  });

  it("refuses bytes that are not a report, naming the fault", () => {
    expect(() => decodeReport(Uint8Array.from([1, 2, 3]))).toThrow(/truncated entry at byte 0/);
    expect(() => decodeReport(report([1n, 1, 2, 0]))).toThrow(/more prefilling than in flight/);
    expect(() => decodeReport(report([1n, MAX_INFLIGHT_PER_POD + 1, 0, 0]))).toThrow(/requests in flight to one pod, above the 100000 Envoy allows/);
    expect(() => decodeReport(report([1n, MAX_INFLIGHT_PER_POD, 0, 0]))).not.toThrow();
    expect(() => new PeerLoadMerge().take("a", Uint8Array.from([0, 0, 0, 0, 0, 0, 0, 0, 0x80]))).toThrow(/bad varint/);
  });
});

describe("a replica's routing core with its peers' in flight (native build)", () => {
  let x: Workers;
  let y: Workers;
  let links: NativeRouter[];
  beforeAll(async () => {
    [x, y] = [await Workers.start(1), await Workers.start(1)];
    links = [await NativeRouter.load(), await NativeRouter.load()];
  });

  /** One sharing round: both links report, the merge runs, both links publish what they were sent. */
  function round(merge: PeerLoadMerge): Uint8Array[] {
    const reports = [links[0].linkReport(x.shared.inflight), links[1].linkReport(y.shared.inflight)];
    merge.take("x", reports[0]);
    merge.take("y", reports[1]);
    const out = merge.round();
    x.shared.peers = links[0].linkReceive(out.get("x")!);
    y.shared.peers = links[1].linkReceive(out.get("y")!);
    x.tick();
    y.tick();
    return reports;
  }

  it("counts the peers' requests with its own, reports only changed entries, and releases its own only", () => {
    x.fresh();
    y.fresh();
    for (const l of links) l.linkReset();
    for (const w of [x, y]) w.install([endpoint(A), endpoint(B)], { running: 1 });
    const merge = new PeerLoadMerge();
    const first = x.route(0, chat("one"));
    const other = first === A ? B : A;
    let reports = round(merge);
    const [[hash, figures]] = decodeReport(reports[0]);
    expect(figures).toEqual([1, 0, 0]);
    expect(reports[1].byteLength).toBe(0);
    // y sees x's request and steers away from it; x's own count is not doubled.
    expect(y.count(first)).toBe(1);
    expect(x.count(first)).toBe(1);
    expect(y.route(0, chat("two"))).toBe(other);
    // A release on y of a request it never routed takes nothing off the peers' count.
    y.release(0, first);
    y.tick();
    expect(y.count(first)).toBe(1);

    // Nothing changed on x: its report is empty; x's end is reported as the one entry it changed.
    reports = round(merge);
    expect(reports[0].byteLength).toBe(0);
    expect(x.count(other)).toBe(1);
    x.release(0, first);
    x.tick();
    reports = round(merge);
    expect(decodeReport(reports[0])).toEqual([[hash, [0, 0, 0]]]);
    expect(y.count(first)).toBe(0);
    expect(y.count(other)).toBe(1);
  });

  it("a link's new stream reports its whole table again and starts with no peers", () => {
    x.fresh();
    for (const l of links) l.linkReset();
    x.install([endpoint(A), endpoint(B)], { running: 1 });
    x.route(0, chat("one"));
    expect(decodeReport(links[0].linkReport(x.shared.inflight))).toHaveLength(1);
    expect(links[0].linkReport(x.shared.inflight).byteLength).toBe(0);
    links[0].linkReset();
    expect(decodeReport(links[0].linkReport(x.shared.inflight))).toHaveLength(1);
    // A fan-out naming an id it was never told is refused (empty: the link drops the stream).
    expect(links[0].linkReceive(Uint8Array.from([2, 1, 0, 0])).byteLength).toBe(0);
  });
});
