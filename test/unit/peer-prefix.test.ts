// Prefix placements shared between Envoy replicas through the control plane:
// the records' encoding and the link's report and apply (native build,
// assembly/core/prefix/prefix-share.ts), and the aggregator's merge with its
// cap (host/aggregator/peer-prefix.ts).
import { readFileSync } from "node:fs";
import { beforeAll, describe, expect, it } from "vitest";
import { PeerPrefixMerge, splitRecords } from "../../host/aggregator/peer-prefix.js";
import { A, B, C, chat, endpoint, SYSTEM, Workers } from "../../testing/fixtures/workers.js";
import { NativeRouter } from "../../testing/native/router.js";
import { Rng } from "../../testing/fixtures/rng.js";

/** Records as the link encodes them: u64 endpoint, varint new blocks, varint key count, u64 keys. */
function records(...list: Array<[bigint, number, bigint[]]>): Uint8Array {
  const bytes: number[] = [];
  const u64 = (v: bigint) => {
    for (let i = 0n; i < 64n; i += 8n) bytes.push(Number((v >> i) & 0xffn));
  };
  const varint = (v: number) => {
    for (; v >= 0x80; v = Math.floor(v / 0x80)) bytes.push((v % 0x80) | 0x80);
    bytes.push(v);
  };
  for (const [endpointHash, newBlocks, keys] of list) {
    u64(endpointHash);
    varint(newBlocks);
    varint(keys.length);
    keys.forEach(u64);
  }
  return Uint8Array.from(bytes);
}

/** A chat whose long system prompt starts with `topic`: prompts of one topic share their prefix, of two topics none. */
const onTopic = (topic: string, user: string) =>
  JSON.stringify({ model: "llama", messages: [{ role: "system", content: `${topic}: ${SYSTEM}` }, { role: "user", content: user }] });

/** The endpoint hash of each record in `bytes`. */
const endpoints = (bytes: Uint8Array) =>
  splitRecords(bytes).map((r) => new DataView(r.buffer, r.byteOffset, r.byteLength).getBigUint64(0, true));

describe("the aggregator's merge of the replicas' prefix records", () => {
  it("sends each Envoy the others' records of the round, in the order they came, and lets the round go", () => {
    const merge = new PeerPrefixMerge();
    merge.take("a", records([1n, 3, [10n, 11n]]));
    merge.take("b", records([2n, 0, [20n]], [3n, 1, []]));
    merge.take("c", new Uint8Array(0));
    merge.take("a", records([4n, 2, [40n]]));
    const round = merge.round();
    expect(endpoints(round.get("a")!)).toEqual([2n, 3n]);
    expect(endpoints(round.get("b")!)).toEqual([1n, 4n]);
    expect(endpoints(round.get("c")!)).toEqual([1n, 2n, 3n, 4n]);
    expect(round.get("c")!).toEqual(Uint8Array.from([...records([1n, 3, [10n, 11n]]), ...records([2n, 0, [20n]], [3n, 1, []]), ...records([4n, 2, [40n]])]));
    // The next round has nothing to tell anyone; an Envoy whose stream ended is sent nothing.
    merge.forget("c");
    const next = merge.round();
    expect([...next.keys()].sort()).toEqual(["a", "b"]);
    expect(next.get("a")!.byteLength).toBe(0);
    expect(merge.dropped).toBe(0);
  });

  it("keeps a fan-out within its cap by dropping the oldest records, and counts them", () => {
    const one = records([1n, 1, [1n, 2n, 3n, 4n, 5n, 6n, 7n, 8n, 9n, 10n]]).byteLength;
    expect(one).toBe(90);
    const merge = new PeerPrefixMerge(2 * one + 10);
    for (let i = 1n; i <= 5n; i++) merge.take("a", records([i, 1, [1n, 2n, 3n, 4n, 5n, 6n, 7n, 8n, 9n, 10n]]));
    merge.take("b", new Uint8Array(0));
    const round = merge.round();
    expect(endpoints(round.get("b")!)).toEqual([4n, 5n]);
    expect(round.get("b")!.byteLength).toBeLessThanOrEqual(2 * one + 10);
    expect(merge.dropped).toBe(3);
  });

  it("refuses bytes that are not records, naming the fault", () => {
    const merge = new PeerPrefixMerge();
    expect(() => merge.take("a", Uint8Array.from([1, 2, 3]))).toThrow(/truncated/);
    expect(() => merge.take("a", records([1n, 0, Array.from({ length: 11 }, (_, i) => BigInt(i))]))).toThrow(/11 keys/);
    expect(() => merge.take("a", records([1n, 0, [5n]]).subarray(0, 17))).toThrow(/truncated/);
    expect(() => merge.take("a", Uint8Array.from([0, 0, 0, 0, 0, 0, 0, 0, 0x80]))).toThrow(/bad varint/);
    // A refused report takes nothing and joins no one.
    expect(merge.round().size).toBe(0);
  });

  it("allows as many keys per record as the routing core writes", () => {
    const core = readFileSync(new URL("../../assembly/core/prefix/prefix-keys.ts", import.meta.url), "utf8");
    const max = Number(/export const MAX_KEYS: i32 = (\d+);/.exec(core)?.[1]);
    const keys = Array.from({ length: max }, (_, i) => BigInt(i + 1));
    expect(splitRecords(records([1n, 0, keys]))).toHaveLength(1);
    expect(() => splitRecords(records([1n, 0, [...keys, 0n]]))).toThrow(/keys/);
  });
});

describe("a replica's link reporting and applying prefix records (native build)", () => {
  let x: Workers;
  let y: Workers;
  let links: NativeRouter[];
  beforeAll(async () => {
    [x, y] = [await Workers.start(2), await Workers.start(2)];
    // Tie-breaks of their own: y's workers would not follow x's picks by drawing alike.
    y.routers.forEach((r, i) => r.reset(200 + i));
    links = [await NativeRouter.load(), await NativeRouter.load()];
  });

  /** One sharing round: both links report what their workers logged, the merge runs, both apply what they were sent, both Envoys' workers tick. */
  function round(merge: PeerPrefixMerge): Uint8Array[] {
    x.tick();
    y.tick();
    const reports = [links[0].linkPrefixReport(x.shared.prefixLog), links[1].linkPrefixReport(y.shared.prefixLog)];
    merge.take("x", reports[0]);
    merge.take("y", reports[1]);
    const out = merge.round();
    for (const [w, key, link] of [[x, "x", links[0]], [y, "y", links[1]]] as const) {
      const sent = out.get(key)!;
      if (sent.byteLength === 0) continue;
      const log = link.linkPrefixApply(w.shared.prefixLog, sent);
      expect(log.byteLength).toBeGreaterThan(0);
      w.shared.prefixLog = log;
    }
    x.tick();
    y.tick();
    return reports;
  }

  it("sends a long prompt's placement to the other replica, whose workers then route its prefix there, and never reports it back", () => {
    const merge = new PeerPrefixMerge();
    const pods = [endpoint(A), endpoint(B), endpoint(C)];
    for (const w of [x, y]) w.install(pods, { prefix: 1 });
    const topics = ["billing", "shipping", "returns", "accounts"];
    const placed = topics.map((t, i) => x.route(i % 2, onTopic(t, "first question")));
    let reports = round(merge);
    expect(endpoints(reports[0])).toHaveLength(4);
    expect(reports[1].byteLength).toBe(0);
    // Both of y's workers (neither routed these prefixes) send each to the pod x chose for it.
    const followed = topics.flatMap((t) => [0, 1].map((w) => y.route(w, onTopic(t, `question ${w}`))));
    expect(followed).toEqual(placed.flatMap((p) => [p, p]));
    // y's own placements go to x; the records y's link appended for x are not among them.
    reports = round(merge);
    expect(reports[0].byteLength).toBe(0);
    expect(endpoints(reports[1])).toHaveLength(8);
    reports = round(merge);
    expect(reports.map((r) => r.byteLength)).toEqual([0, 0]);
  });

  it("sends an adapter's placement to the other replica, whose workers then send the adapter to that idle pod", () => {
    const merge = new PeerPrefixMerge();
    const adapter = "sql-lora";
    const body = chat("select", adapter);
    const pods = [endpoint(A, { maxLora: 4 }), endpoint(B, { maxLora: 4 }), endpoint(C, { maxLora: 4 })];
    y.install(pods, { lora: 1 }, [adapter]);
    // Where y would place it cold (the rendezvous pick): x places it elsewhere, on the only pod it then has.
    const cold = y.route(0, body);
    y.fresh();
    y.install(pods, { lora: 1 }, [adapter]);
    const placed = pods.find((e) => e.address !== cold)!;
    x.install([placed], { lora: 1 }, [adapter]);
    expect(x.route(0, body)).toBe(placed.address);
    const reports = round(merge);
    expect(endpoints(reports[0])).toHaveLength(1);
    // No scrape shows it anywhere; both of y's workers follow x's placement.
    expect([y.route(0, body), y.route(1, body)]).toEqual([placed.address, placed.address]);
  });

  it("refuses records that do not decode (the link then drops its stream) and leaves the log as it was", () => {
    expect(links[0].linkPrefixApply(x.shared.prefixLog, Uint8Array.from([1, 2, 3])).byteLength).toBe(0);
    expect(links[0].linkPrefixApply(x.shared.prefixLog, records([1n, 0, Array.from({ length: 11 }, () => 1n)])).byteLength).toBe(0);
    // An empty log takes records as a new log.
    expect(links[0].linkPrefixApply(new Uint8Array(0), records([1n, 0, [1n]])).byteLength).toBe(8 + 512 * 104);
  });

  it("takes exactly the bytes the aggregator takes as records, and never traps on others", () => {
    const rng = new Rng(5);
    const good = records([1n, 3, [1n, 2n]], [2n, 200, []], [3n, 0, Array.from({ length: 10 }, (_, i) => BigInt(i))]);
    for (let i = 0; i < 2000; i++) {
      // Valid records cut short, bytes flipped, or noise.
      const bytes = good.slice(0, Math.floor(rng.uniform(0, good.byteLength + 1)));
      if (i % 2 === 1 && bytes.byteLength > 0) bytes[Math.floor(rng.uniform(0, bytes.byteLength))] = Math.floor(rng.uniform(0, 256));
      if (i % 5 === 4) bytes.set(Array.from({ length: bytes.byteLength }, () => Math.floor(rng.uniform(0, 256))));
      let aggregator = true;
      try {
        splitRecords(bytes);
      } catch {
        aggregator = false;
      }
      const log = links[0].linkPrefixApply(new Uint8Array(0), bytes);
      expect(log.byteLength > 0, `bytes ${Buffer.from(bytes).toString("hex")}`).toBe(aggregator);
    }
  });
});
