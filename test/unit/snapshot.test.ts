// The snapshot codec as compiled into the filter, driven through the native
// build: malformed or nonsensical snapshots must be refused or neutralised,
// never reach a score.
import { beforeAll, describe, expect, it } from "vitest";
import { NativeRouter } from "../../testing/native/router.js";
import { decodeSnapshot, encodeSnapshot, PRIORITY_WIRE, type EndpointMsg, type WeightsMsg } from "../../host/proto.js";
import { BUILTIN_PROFILES, DEFAULT_WEIGHTS, parseGatewayConfig } from "../../host/config.js";
import { builtSnapshot, endpoint, pool, podEntry, snapshot } from "../../testing/fixtures/snapshot-builders.js";

let router: NativeRouter;
const CHAT = '{"model":"m","messages":[]}';

beforeAll(async () => {
  router = await NativeRouter.load();
});

// Just enough of the protobuf wire format to build broken messages by hand.
const varint = (n: number): number[] => {
  const out: number[] = [];
  for (; n >= 0x80; n = Math.floor(n / 128)) out.push((n % 128) | 0x80);
  return [...out, n];
};
const tag = (field: number, wire: number) => varint(field * 8 + wire);
const len = (field: number, content: number[]) => [...tag(field, 2), ...varint(content.length), ...content];
const str = (field: number, s: string) => len(field, [...Buffer.from(s)]);

/** Snapshot { models: [m -> pool 0], pools: [{ name p, base m, a weight entry?, endpoint }] } with the given inner parts. */
function handMade(parts: { model?: number[]; weights?: number[]; endpoint?: number[]; pool?: number[] } = {}): Uint8Array {
  const model = [...str(1, "m"), ...tag(2, 0), 0, ...(parts.model ?? [])];
  const ep = [...str(1, "127.0.0.1:1"), ...tag(5, 0), 1, ...(parts.endpoint ?? [])];
  const p = [...str(1, "p"), ...str(2, "m"), ...(parts.weights ? len(5, parts.weights) : []), ...len(4, ep), ...(parts.pool ?? [])];
  return new Uint8Array([...tag(1, 0), 1, ...len(2, model), ...len(3, p)]);
}

function accepts(bytes: Uint8Array): boolean {
  try {
    router.setSnapshot(bytes);
    return true;
  } catch {
    return false;
  }
}

function pick(endpoints: EndpointMsg[], weights: Partial<WeightsMsg>): string {
  router.reset(7);
  router.setSnapshot(snapshot([pool("p", "m", endpoints, weights)]));
  const r = router.route(CHAT);
  if (!("endpoint" in r)) throw new Error(JSON.stringify(r));
  return r.endpoint;
}

describe("snapshot decoding", () => {
  it("accepts the hand-made snapshot the failure cases start from", () => {
    expect(accepts(handMade())).toBe(true);
    expect(router.route(CHAT)).toMatchObject({ endpoint: "127.0.0.1:1" });
    expect(accepts(handMade({ weights: [...str(1, "queue"), ...tag(2, 5), 0, 0, 0x80, 0x3f] }))).toBe(true);
  });

  it.each([
    ["a truncated varint in a model", { model: [...tag(2, 0), 0x80] }],
    ["an unknown wire type in a pool", { pool: [...tag(9, 7)] }],
    ["a truncated float in the weights", { weights: [...str(1, "queue"), ...tag(2, 5), 0, 0] }],
    ["a string running past an endpoint's end", { endpoint: [...tag(1, 2), 50, 0x31] }],
    ["invalid UTF-8 in a model name", { model: len(1, [0x6d, 0xc0, 0xaf]) }],
  ])("refuses the whole snapshot for %s", (_name, parts) => {
    expect(accepts(handMade(parts))).toBe(false);
  });

  it.each([
    ["NaN", NaN],
    ["-Infinity", -Infinity],
    ["Infinity", Infinity],
    ["negative", -1],
  ])("refuses a weight of %s", (_name, value) => {
    expect(accepts(snapshot([pool("p", "m", [endpoint("10.0.0.1:80")], { kvCache: value })]))).toBe(false);
    expect(accepts(snapshot([pool("p", "m", [endpoint("10.0.0.1:80")], { queue: 0, kvCache: 3e38 })]))).toBe(true);
  });

  it.each([NaN, Infinity, -Infinity, -0.5, 1.5])("does not route on a KV-cache usage of %s, and scores it as full", (usage) => {
    // Fresh, it would win on its empty queue; marked stale, the other pod gets the request.
    const bad = endpoint("10.0.0.1:80", { kvCacheUsage: usage, waiting: 0 });
    expect(pick([bad, endpoint("10.0.0.2:80", { kvCacheUsage: 0.5, waiting: 10 })], { queue: 1, kvCache: 0, running: 0 })).toBe("10.0.0.2:80");
    // All stale: fail open, with the bad usage counted as a full cache.
    expect(pick([bad, endpoint("10.0.0.2:80", { kvCacheUsage: 0.9, fresh: false })], { queue: 0, kvCache: 1, running: 0 })).toBe("10.0.0.2:80");
  });

  it("reads queue counts as unsigned, never as negative loads", () => {
    const huge = 2 ** 32 - 1;
    expect(pick([endpoint("10.0.0.1:80", { waiting: huge }), endpoint("10.0.0.2:80", { waiting: 5 })], { queue: 1, kvCache: 0, running: 0 })).toBe("10.0.0.2:80");
    expect(pick([endpoint("10.0.0.1:80", { running: huge }), endpoint("10.0.0.2:80", { running: 5 })], { queue: 0, kvCache: 0, running: 1 })).toBe("10.0.0.2:80");
  });
});

describe("Endpoint.capacity on the wire", () => {
  it("round-trips through the encoder as a float; left out, it decodes as 0 (unknown)", () => {
    const sent = snapshot([pool("p", "m", [endpoint("10.0.0.1:80", { capacity: 0.35 }), endpoint("10.0.0.2:80", { capacity: 83 }), endpoint("10.0.0.3:80")])]);
    const bytes = encodeSnapshot(sent);
    // Field 9, wire type 5 (fixed32): tag byte 0x4d, then 0.35 as a little-endian float32.
    const f32 = Buffer.alloc(4);
    f32.writeFloatLE(0.35);
    expect(bytes.includes(Buffer.from([0x4d, ...f32]))).toBe(true);
    const got = decodeSnapshot(bytes).pools[0].endpoints.map((e) => e.capacity);
    expect(got).toEqual([Math.fround(0.35), 83, 0]);
  });

  it("does not upset the filter's decoder, which skips fields it does not score on", () => {
    // A queue of 9 behind a full batch of one, against an idle pod a sixth as fast.
    expect(pick([endpoint("10.0.0.1:80", { waiting: 9, running: 1, batchSlots: 1, capacity: 3 }), endpoint("10.0.0.2:80", { capacity: 0.5 })], { queue: 1, kvCache: 0, running: 0 })).toBe(
      "10.0.0.2:80",
    );
  });
});

describe("the aggregator's snapshot: profiles, classes and splits", () => {
  const config = parseGatewayConfig(`
pools:
  - name: llama
    baseModel: llama-3.1-8b
    adapters: [sql-lora, chat-lora]
    batchSlots: 64
    endpoints: ["10.0.0.1:8000"]
  - name: qwen
    baseModel: qwen3-32b
    profile: throughput
    weights: { queue: 3 }
    endpoints: ["10.0.0.2:8000"]
  - name: mistral
    baseModel: mistral-7b
    engine: tgi
    weights: { queue: 2, prefix: 4 }
    endpoints: ["10.0.0.3:8000"]
profiles:
  batch: { admission: { maxWaiting: 64 }, deadlines: { firstByteMs: 90000, streamIdleMs: 1000 } }
models:
  - { name: sql-lora, profile: batch, priority: sheddable }
  - name: chat
    priority: critical
    split: [{ model: qwen3-32b, weight: 10 }, { model: llama-3.1-8b, weight: 90 }]
  - name: llama-3.1-8b
    split: [{ model: llama-3.1-8b, weight: 9 }, { model: chat-lora, weight: 1 }]
  - { name: qwen3-32b, profile: latency }
`);
  const sent = decodeSnapshot(encodeSnapshot(builtSnapshot(config)));
  const profileName = (model: string) => sent.profiles![sent.models.find((m) => m.name === model)!.profile!].name;

  it("lists served names pool by pool, then virtual ones on their first target's pool", () => {
    expect(sent.models.map((m) => [m.name, m.pool, m.adapter])).toEqual([
      ["llama-3.1-8b", 0, ""],
      ["sql-lora", 0, "sql-lora"],
      ["chat-lora", 0, "chat-lora"],
      ["qwen3-32b", 1, ""],
      ["mistral-7b", 2, ""],
      ["chat", 1, ""],
    ]);
  });

  it("gives each model its class as the proto enum's number (Standard by default)", () => {
    expect(sent.models.map((m) => m.priority)).toEqual([0, 2, 0, 0, 0, 1]);
    expect(PRIORITY_WIRE).toEqual({ standard: 0, critical: 1, sheddable: 2 });
  });

  it("sends splits as model indexes, a model splitting to itself included", () => {
    expect(sent.models.map((m) => m.splits)).toEqual([
      [{ model: 0, weight: 9 }, { model: 2, weight: 1 }],
      [], [], [], [],
      [{ model: 3, weight: 10 }, { model: 0, weight: 90 }],
    ]);
  });

  it("sends each profile in use once; a pool's weights make <profile>@<pool> unless they change nothing", () => {
    expect(sent.models.map((m) => profileName(m.name))).toEqual([
      "latency", "batch", "latency", "latency@qwen", "latency", "throughput@qwen",
    ]);
    expect(sent.profiles!.map((p) => p.name)).toEqual(["latency", "batch", "latency@qwen", "throughput@qwen"]);
    const [latency, batch, latencyQwen, throughputQwen] = sent.profiles!;
    expect(latency).toEqual({ name: "latency", weights: DEFAULT_WEIGHTS, admission: latencyAdmission(), deadlines: latencyDeadlines() });
    expect(batch.admission.maxWaiting).toBe(64);
    // streamIdleMs is Envoy's (the stream routes' per-try idle timeout): not in the snapshot.
    expect(batch.deadlines).toEqual({ ...latencyDeadlines(), firstByteMs: 90_000 });
    expect(throughputQwen.deadlines).toEqual({ firstByteMs: 300_000, promptMsPerKtoken: 1000, outputMsPerToken: 200, assumedOutputTokens: 4096 });
    expect(latencyQwen.weights).toEqual({ ...DEFAULT_WEIGHTS, queue: 3 });
    expect(throughputQwen.weights).toEqual({ ...BUILTIN_PROFILES.throughput.weights, queue: 3 });
    expect(throughputQwen.admission.maxWaiting).toBe(32);
  });

  it("gives every endpoint its pool's batchSlots (the file's, else the engine's default)", () => {
    const pods = config.pools.map((p, i) => p.endpoints.map((address) => podEntry(config, i, address)));
    const body = decodeSnapshot(encodeSnapshot(builtSnapshot(config, pods)));
    expect(body.pools.map((p) => p.endpoints.map((e) => e.batchSlots))).toEqual([[64], [256], [128]]);
  });

  it("keeps each pool's weights: its default profile's, with its own over them", () => {
    expect(sent.pools.map((p) => p.weights)).toEqual([DEFAULT_WEIGHTS, { ...BUILTIN_PROFILES.throughput.weights, queue: 3 }, DEFAULT_WEIGHTS]);
  });

  it("sends every served model on the latency profile and Standard for a config without traffic settings", () => {
    const plain = parseGatewayConfig(`pools: [{ name: p, baseModel: m, adapters: [a], endpoints: ["10.0.0.1:1"] }]`);
    const body = builtSnapshot(plain);
    expect(body.models).toEqual([
      { name: "m", pool: 0, adapter: "", profile: 0, priority: 0, splits: [] },
      { name: "a", pool: 0, adapter: "a", profile: 0, priority: 0, splits: [] },
    ]);
    expect(body.profiles.map((p) => p.name)).toEqual(["latency"]);
  });
});

/** The built-in latency deadlines as the snapshot carries them. */
function latencyDeadlines() {
  const d = BUILTIN_PROFILES.latency.deadlines;
  return { firstByteMs: d.firstByteMs, promptMsPerKtoken: d.promptMsPerKToken, outputMsPerToken: d.outputMsPerToken, assumedOutputTokens: d.assumedOutputTokens };
}

/** The built-in latency admission as it comes back from the wire (floats are float32). */
function latencyAdmission() {
  const a = BUILTIN_PROFILES.latency.admission;
  return { ...a, maxKvCache: Math.fround(a.maxKvCache) };
}
