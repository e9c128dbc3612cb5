// The filter's Envoy stats on the proxy-wasm emulator: tokens per pool and
// model from the answers' usage, the pools' pod gauges, the view's age, the
// decision-time and time-to-first-token histograms, and label values that keep the names
// parseable by the bootstrap's stats_tags.
import { beforeEach, describe, expect, it } from "vitest";
import type { SnapshotMsg } from "../../host/proto.js";
import { endpoint, pool, snapshot } from "../../testing/fixtures/snapshot-builders.js";
import { EmulatedGateway } from "../helpers/emulated-gateway.js";
import type { HttpStream } from "../../testing/proxy-wasm-emulator/index.js";

const START_MS = 1_700_000_000_000;
const MODEL = "org/llama-3.1-8b:instruct";

function post(body: object, headers: Record<string, string> = {}) {
  const text = JSON.stringify(body);
  return { headers: { ":method": "POST", ":path": "/v1/chat/completions", "content-length": String(Buffer.byteLength(text)), ...headers }, body: text };
}

const chat = (model = MODEL, extra: object = {}) => post({ model, messages: [{ role: "user", content: "hi" }], ...extra });

function answer(prompt: number, completion: number): string {
  return JSON.stringify({ id: "c", object: "chat.completion", choices: [{ index: 0, message: { role: "assistant", content: "ok" } }], usage: { prompt_tokens: prompt, completion_tokens: completion } });
}

function streamed(prompt: number, completion: number): string[] {
  const chunk = (extra: object) => `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", ...extra })}\n\n`;
  return [chunk({ choices: [{ delta: { content: "o" } }], usage: null }), chunk({ choices: [{ delta: { content: "k" } }], usage: null }),
    chunk({ choices: [], usage: { prompt_tokens: prompt, completion_tokens: completion } }), "data: [DONE]\n\n"];
}

const primaryOf = (s: HttpStream) => s.requestHeaders.get("x-gateway-destination-endpoint")?.split(",")[0];

let gateway: EmulatedGateway;
const m = (name: string) => gateway.host.metric(`llm_gateway.${name}`);

describe("tokens in and out per pool and model", () => {
  beforeEach(() => {
    gateway = new EmulatedGateway({ startMs: START_MS, settings: { staleView: { maxAgeMs: 3_000, policy: "failOpen", retryAfterS: 1 } } });
    gateway.publish(snapshot([pool("p", MODEL, [endpoint("10.0.0.1:80"), endpoint("10.0.0.2:80")]), pool("q", "qwen", [endpoint("10.0.0.3:80")])]));
    gateway.host.tick();
  });

  function serve(spec: ReturnType<typeof post>, chunks: string[]): void {
    const stream = gateway.request(spec);
    expect(stream.localResponse).toBeUndefined();
    stream.respond(chunks);
    stream.finish({ responseCode: 200, upstreamAddress: primaryOf(stream) });
  }

  it("adds up the usage of plain answers and of streams that asked for it, per pool and model", () => {
    serve(chat(), [answer(10, 3)]);
    const a = answer(7, 2);
    serve(chat(), [a.slice(0, 40), a.slice(40)]);
    serve(chat(MODEL, { stream: true, stream_options: { include_usage: true } }), streamed(5, 4));
    serve(chat("qwen"), [answer(100, 50)]);
    gateway.host.tick();
    expect(m(`tokens_in_total;pool=p;model=${MODEL}`)).toBe(22);
    expect(m(`tokens_out_total;pool=p;model=${MODEL}`)).toBe(9);
    expect(m("tokens_in_total;pool=q;model=qwen")).toBe(100);
    expect(m("tokens_out_total;pool=q;model=qwen")).toBe(50);
    expect(m(`requests_routed_total;pool=p;model=${MODEL}`)).toBe(3);
  });

  it("does not read a stream that did not ask for usage, nor count an answer that has none", () => {
    serve(chat(MODEL, { stream: true }), streamed(5, 4));
    serve(chat(), ['{"error":{"message":"overloaded"}}']);
    gateway.host.tick();
    expect(m(`tokens_in_total;pool=p;model=${MODEL}`)).toBe(0);
    expect(m(`requests_routed_total;pool=p;model=${MODEL}`)).toBe(2);
  });

  it("counts a client that left mid-answer only if the usage had already passed", () => {
    const cut = gateway.request(chat());
    cut.respond(['{"id":"c","choices":[],"usage":{"prompt_tokens":3']);
    cut.finish({});
    gateway.host.tick();
    expect(m(`tokens_in_total;pool=p;model=${MODEL}`)).toBe(0);
  });

  it("counts the tokens of requests routed blind (the view too old: a pod last known good, not scored)", () => {
    gateway.host.advance(10_000);
    gateway.host.tick();
    const stream = gateway.request(chat());
    expect(stream.requestHeaders.get("x-gateway-destination-endpoint")).toMatch(/^10\.0\.0\.[12]:80,10\.0\.0\.[12]:80$/);
    stream.respond([answer(4, 1)]);
    stream.finish({ responseCode: 200, upstreamAddress: "10.0.0.2:80" });
    gateway.host.tick();
    expect(m(`requests_routed_blind_total;pool=p;model=${MODEL}`)).toBe(1);
    expect(m(`requests_routed_total;pool=p;model=${MODEL}`)).toBe(1);
    expect(m(`tokens_in_total;pool=p;model=${MODEL}`)).toBe(4);
  });
});

describe("the pools' gauges and the view's age", () => {
  const fleet = (version: number, fresh: boolean[]): SnapshotMsg =>
    snapshot([pool("p", "llama", fresh.map((f, i) => endpoint(`10.0.0.${i + 1}:80`, { fresh: f })))], [], version);

  it("counts pods, stale pods and ejected pods per pool, and follows ejections as they expire", () => {
    gateway = new EmulatedGateway({ startMs: START_MS, settings: { passiveHealth: { ejectAfterFailures: 1, ejectMs: 5_000 } } });
    gateway.publish(fleet(1, [true, true, false]));
    gateway.host.tick();
    expect([m("pool_pods;pool=p"), m("pool_pods_stale;pool=p"), m("pool_pods_ejected;pool=p")]).toEqual([3, 1, 0]);
    expect(m("snapshot_endpoints")).toBe(3);
    expect(m("snapshot_version")).toBe(1);

    const failed = gateway.request(chat("llama"));
    const primary = primaryOf(failed)!;
    failed.finish({ responseCode: 502, upstreamAddress: primary });
    gateway.host.advance(1_000);
    gateway.host.tick();
    expect(m("pool_pods_ejected;pool=p")).toBe(1);
    gateway.host.advance(5_000);
    gateway.host.tick();
    expect(m("pool_pods_ejected;pool=p")).toBe(0);
  });

  it("reports how long ago the aggregator was last heard, refreshed at most once a second", () => {
    gateway = new EmulatedGateway({ startMs: START_MS });
    gateway.publish(fleet(1, [true]));
    gateway.host.tick();
    expect(m("snapshot_age_seconds")).toBe(0);
    gateway.host.advance(400);
    gateway.host.tick();
    expect(m("snapshot_age_seconds")).toBe(0);
    gateway.host.advance(700);
    gateway.host.tick();
    expect(m("snapshot_age_seconds")).toBe(1);
    gateway.host.advance(1_000);
    gateway.host.tick();
    expect(m("snapshot_age_seconds")).toBe(2);
    gateway.heartbeat();
    gateway.host.advance(1_000);
    gateway.host.tick();
    expect(m("snapshot_age_seconds")).toBe(1);
  });

  it("zeroes the gauges of a pool a new snapshot no longer has", () => {
    gateway = new EmulatedGateway({ startMs: START_MS });
    gateway.publish(snapshot([pool("p", "llama", [endpoint("10.0.0.1:80")]), pool("old", "qwen", [endpoint("10.0.0.9:80", { fresh: false })])], [], 1));
    gateway.host.tick();
    expect([m("pool_pods;pool=old"), m("pool_pods_stale;pool=old")]).toEqual([1, 1]);
    gateway.publish(snapshot([pool("p", "llama", [endpoint("10.0.0.1:80")])], [], 2));
    gateway.host.tick();
    expect([m("pool_pods;pool=old"), m("pool_pods_stale;pool=old"), m("pool_pods;pool=p")]).toEqual([0, 0, 1]);
  });
});

const DECISION_BOUNDS = ["0.000005", "0.00001", "0.00002", "0.00003", "0.00005", "0.000075", "0.0001", "0.00015", "0.0002", "0.0003", "0.0005", "0.00075", "0.001", "0.002", "0.005", "0.01", "0.05", "+Inf"];

describe("decision time, time to first token and label values", () => {
  it("counts one decision in 16 of every worker, from its first, in buckets with bounds in seconds, handed over on the tick", () => {
    gateway = new EmulatedGateway({ startMs: START_MS, workers: 2 });
    gateway.publish(snapshot([pool("p", "llama", [endpoint("10.0.0.1:80")])]));
    gateway.host.tick();
    for (let i = 0; i < 33; i++) gateway.request(chat("llama"), 0).finish({ responseCode: 200 });
    gateway.request(chat("llama"), 1).finish({ responseCode: 200 });
    gateway.request(chat("nope"), 1);
    expect(m("decision_duration_seconds_count")).toBe(0);
    gateway.host.tick();
    // A refusal is a decision too: worker 0 timed its 1st, 17th and 33rd, worker 1 its 1st. The emulated clock
    // stands still within a request: every decision took 0 s.
    expect(m("decision_duration_seconds_count")).toBe(4);
    for (const le of DECISION_BOUNDS) expect(m(`decision_duration_seconds_bucket;le=${le}`), le).toBe(4);
    expect(gateway.host.metrics.names().filter((n) => n.startsWith("llm_gateway.decision_duration_seconds_bucket;")).sort())
      .toEqual(DECISION_BOUNDS.map((le) => `llm_gateway.decision_duration_seconds_bucket;le=${le}`).sort());
    expect(gateway.host.metrics.get("llm_gateway.decision_duration_seconds_count")?.kind).toBe("counter");
  });

  it("times a stream's first answer bytes from its complete request, per pool and model, in cumulative buckets", () => {
    gateway = new EmulatedGateway({ startMs: START_MS });
    gateway.publish(snapshot([pool("p", MODEL, [endpoint("10.0.0.1:80")])]));
    gateway.host.tick();
    const ttft = (le: string) => m(`time_to_first_token_seconds_bucket;pool=p;model=${MODEL};le=${le}`);
    const stream = gateway.request(chat(MODEL, { stream: true }));
    expect(stream.localResponse).toBeUndefined();
    gateway.host.advance(300);
    stream.respond(streamed(3, 2));
    stream.finish({ responseCode: 200, upstreamAddress: primaryOf(stream) });
    // A plain answer is no stream: its first bytes are the whole answer, not counted.
    const plain = gateway.request(chat(MODEL));
    plain.respond([answer(3, 2)]);
    plain.finish({ responseCode: 200, upstreamAddress: primaryOf(plain) });
    gateway.host.tick();
    expect(m(`time_to_first_token_seconds_count;pool=p;model=${MODEL}`)).toBe(1);
    expect([ttft("0.1"), ttft("0.25"), ttft("0.5"), ttft("1"), ttft("60"), ttft("+Inf")]).toEqual([0, 0, 1, 1, 1, 1]);
    expect(m(`requests_routed_total;pool=p;model=${MODEL}`)).toBe(2);
  });

  it("keeps dots, colons, slashes and brackets in label values and replaces anything that could end a label", () => {
    gateway = new EmulatedGateway({ startMs: START_MS });
    const odd = "team a;b=c";
    gateway.publish(snapshot([pool("p", "llama", [endpoint("[::1]:8000")])], [odd]));
    gateway.host.tick();
    gateway.request(chat("llama")).finish({ responseCode: 200 });
    gateway.request(chat(odd)).finish({ responseCode: 200 });
    gateway.host.tick();
    expect(m("pod_picks_total;pool=p;model_server=[::1]:8000")).toBe(2);
    expect(m("requests_routed_total;pool=p;model=team_a_b_c")).toBe(1);
  });
});
