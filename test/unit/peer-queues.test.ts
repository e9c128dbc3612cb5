// Queue boards shared between Envoy replicas through the control plane: the
// link's report and adoption (native build, the code the filter's link runs)
// and the aggregator's merge (host/aggregator/peer-queues.ts).
import { beforeEach, describe, expect, it } from "vitest";
import { decodeBoard, PeerQueueMerge } from "../../host/aggregator/peer-queues.js";
import type { AdmissionMsg, EndpointMsg, SnapshotMsg } from "../../host/proto.js";
import { endpoint, pool } from "../../testing/fixtures/snapshot-builders.js";
import { NativeRouter, type HeldResult, type PumpEvent, type RouteResult } from "../../testing/native/router.js";
import { NativeSharedData } from "../../testing/native/shared-data.js";

const RECORD = 72;
const ADMIT: AdmissionMsg = {
  enabled: true, maxWaiting: 1, maxKvCache: 0.95, sheddableFactor: 0.5, criticalFactor: 2, maxRetryAfterS: 60,
  waitCriticalMs: 60_000, waitStandardMs: 30_000, waitSheddableMs: 10_000,
};
const WEIGHTS = { queue: 2, kvCache: 1, running: 1, lora: 0, prefix: 0 };
const busy: Partial<EndpointMsg> = { running: 4, batchSlots: 4, waiting: 3 };
const roomForOne: Partial<EndpointMsg> = { running: 3, batchSlots: 4, waiting: 0 };

let version = 0;
const fleet = (a: Partial<EndpointMsg>): SnapshotMsg => ({
  version: ++version,
  generatedUnixMs: 0,
  pools: [pool("p", "llama", [endpoint("10.0.0.1:80", a)], WEIGHTS)],
  profiles: [{ name: "latency", weights: WEIGHTS, admission: ADMIT }],
  models: [{ name: "llama", pool: 0, adapter: "", profile: 0, priority: "STANDARD", splits: [] }],
}) as SnapshotMsg;

/** One Envoy: a worker, its link, their shared data. */
interface Envoy {
  name: string;
  worker: NativeRouter;
  link: NativeRouter;
  shared: NativeSharedData;
}

let envoys: Envoy[];
let merge: PeerQueueMerge;
let now = 1_000;
let nextId = 1;

beforeEach(async () => {
  envoys ??= await Promise.all(["x", "y"].map(async (name) => ({ name, worker: await NativeRouter.load(), link: await NativeRouter.load(), shared: new NativeSharedData() })));
  envoys.forEach((e, i) => {
    e.worker.reset(11 + i);
    e.link.reset(21 + i);
    e.link.linkReset();
    e.shared = new NativeSharedData();
  });
  merge = new PeerQueueMerge();
  now = 1_000;
  nextId = 1;
  clock();
});

function clock(): void {
  for (const e of envoys) for (const r of [e.worker, e.link]) r.setClock(now, now);
}

function install(snap: SnapshotMsg): void {
  for (const e of envoys) e.shared.install(e.worker, snap);
}

function hold(e: Envoy): number {
  const id = nextId++;
  const result: RouteResult | HeldResult = e.shared.routeOrHold(e.worker, JSON.stringify({ model: "llama", messages: [{ role: "user", content: `q${id}` }] }), "chat", { holdId: id });
  expect(result, JSON.stringify(result)).toHaveProperty("held", id);
  return id;
}

/** One share round: every link reports what changed, then adopts what the merge sends it. */
function shareRound(): void {
  for (const e of envoys) {
    const report = e.link.linkQueueReport(e.shared.board);
    if (report) merge.take(e.name, report);
  }
  for (const e of envoys) {
    const peers = merge.fanOut(e.name);
    if (peers) e.shared.board = e.link.linkQueueAdopt(e.shared.board, peers);
  }
}

const ids = (events: PumpEvent[]) => events.map((e) => e.id);
const summaries = (board: Uint8Array) => (board.byteLength < 4 ? 0 : new DataView(board.buffer, board.byteOffset).getUint32(0, true));

describe("queue boards shared between Envoys", () => {
  it("keeps one order over two Envoys: one does not release its request before an earlier one the other holds", () => {
    install(fleet(busy));
    const [x, y] = envoys;
    const older = hold(x);
    now += 5;
    clock();
    const newer = hold(y);
    shareRound();
    install(fleet(roomForOne));
    // y ticks first, but x's request came first.
    expect(ids(y.shared.pump(y.worker))).toEqual([]);
    expect(ids(x.shared.pump(x.worker))).toEqual([older]);
    // Once x's board says it holds nothing, y's goes.
    now += 20;
    clock();
    shareRound();
    expect(ids(y.shared.pump(y.worker))).toEqual([newer]);
  });

  it("without sharing, each Envoy serves its own queue alone (what the order above needs the sharing for)", () => {
    install(fleet(busy));
    const [x, y] = envoys;
    hold(x);
    now += 5;
    clock();
    const newer = hold(y);
    install(fleet(roomForOne));
    expect(ids(y.shared.pump(y.worker))).toEqual([newer]);
  });

  it("estimates one wait over two Envoys: the other's held requests and drain count in this one's, so both refuse alike", () => {
    install(fleet(busy));
    const [x, y] = envoys;
    // No completions seen: each Envoy takes the one pod to drain 1 a second.
    for (const e of [x, y]) hold(e);
    const ask = (e: Envoy) => e.shared.routeOrHold(e.worker, JSON.stringify({ model: "llama", messages: [{ role: "user", content: `r${nextId}` }] }), "chat",
      { holdId: nextId++, maxWaitMs: 1_500, explain: true }) as Extract<RouteResult, { status: number }>;
    // Alone, each sees one held request ahead at 1 a second: a 1-s wait, within 1.5 s.
    expect(ask(x)).toHaveProperty("held");
    shareRound();
    // Shared, x sees its 2 and y's 1 ahead at 2 a second, y its 1 and x's 2: 1.5 s each, still within.
    expect(ask(y)).toHaveProperty("held");
    shareRound();
    // Now 4 held ahead at 2 a second: 2 s on either Envoy, past 1.5 s; the same refusal and Retry-After.
    for (const e of [x, y]) {
      const r = ask(e);
      expect(r, JSON.stringify(r)).toMatchObject({ status: 429, retryAfterS: 3 });
      expect(r.explanation).toContain("held_ahead=4; predicted_wait_ms=2000;");
    }
  });

  it("reports only a change, and only the Envoy's own summaries; adopting replaces the others' and keeps its own", () => {
    install(fleet(busy));
    const [x, y] = envoys;
    hold(x);
    hold(y);
    shareRound();
    expect(summaries(x.shared.board)).toBe(2);
    expect(x.link.linkQueueReport(x.shared.board)).toBeNull();
    // y's queue empties: x is told, and y's summary leaves x's board while x's own stays.
    install(fleet({ running: 0, batchSlots: 4, waiting: 0 }));
    y.shared.pump(y.worker);
    shareRound();
    expect(summaries(x.shared.board)).toBe(1);
    expect(x.link.linkQueueReport(x.shared.board)).toBeNull();
    expect(() => x.link.linkQueueAdopt(x.shared.board, Uint8Array.from([1, 0, 0, 0]))).toThrow(/rejected/);
  });
});

describe("the aggregator's merge of the Envoys' queue boards", () => {
  const board = (...writers: number[]) => {
    const out = new Uint8Array(4 + writers.length * RECORD);
    const view = new DataView(out.buffer);
    view.setUint32(0, writers.length, true);
    writers.forEach((w, i) => view.setUint32(4 + i * RECORD, w, true));
    return out;
  };
  const writers = (bytes: Uint8Array) => decodeBoard(bytes, "test").map((r) => new DataView(r.buffer).getUint32(0, true));

  it("sends each Envoy the others' summaries, their writers renumbered apart per Envoy, only when something changed", () => {
    const m = new PeerQueueMerge();
    m.take("a", board(1, 2));
    m.take("b", board(1));
    expect(writers(m.fanOut("a")!)).toEqual([0x40010001]);
    expect(writers(m.fanOut("b")!)).toEqual([0x40000001, 0x40000002]);
    expect(m.fanOut("a")).toBeUndefined();
    m.forget("b");
    expect(writers(m.fanOut("a")!)).toEqual([]);
    // A new Envoy takes the lowest free number.
    m.take("c", board(5));
    expect(writers(m.fanOut("a")!)).toEqual([0x40010005]);
  });

  it("refuses bytes that are not a board, or that carry another Envoy's summaries, naming the fault", () => {
    const m = new PeerQueueMerge();
    expect(() => m.take("a", Uint8Array.from([1, 0]))).toThrow(/not a queue board/);
    expect(() => m.take("a", board(1).subarray(0, 40))).toThrow(/40 bytes for 1 summaries/);
    const huge = new Uint8Array(4);
    new DataView(huge.buffer).setUint32(0, 5000, true);
    expect(() => m.take("a", huge)).toThrow(/5000 summaries, more than the 1024/);
    expect(() => m.take("a", board(0x40000003))).toThrow(/foreign writer/);
  });
});
