// Load judged against what a pod can hold, requests counted until they end,
// deadlines, and how a request's end is judged: the routing core on the
// native build, with the gateway's default weights and admission.
import { beforeAll, beforeEach, describe, expect, it } from "vitest";
import { NativeRouter, type RouteResult } from "../../testing/native/router.js";
import { NativeSharedData } from "../../testing/native/shared-data.js";
import { NativeUsageScanner } from "../../testing/native/usage.js";
import { BUILTIN_PROFILES } from "../../host/config.js";
import type { EndpointMsg, SnapshotMsg } from "../../host/proto.js";
import { endpoint } from "../../testing/fixtures/snapshot-builders.js";

const A = "10.0.0.1:80";
const B = "10.0.0.2:80";
const ADAPTER = "sql-lora";
const latency = BUILTIN_PROFILES.latency;

/** Pool p (llama, adapter sql-lora) on two vLLM-shaped pods, the latency profile's weights and admission. */
function fleet(a: Partial<EndpointMsg>, b: Partial<EndpointMsg>, deadlines = { firstByteMs: 0, promptMsPerKtoken: 0, outputMsPerToken: 0, assumedOutputTokens: 0 }): SnapshotMsg {
  return {
    version: 1,
    generatedUnixMs: 0,
    pools: [{ name: "p", baseModel: "llama", weights: latency.weights, endpoints: [endpoint(A, { maxLora: 4, ...a }), endpoint(B, { maxLora: 4, ...b })] }],
    profiles: [{ name: "latency", weights: latency.weights, admission: latency.admission, deadlines }],
    models: [
      { name: "llama", pool: 0, adapter: "", profile: 0 },
      { name: ADAPTER, pool: 0, adapter: ADAPTER, profile: 0 },
    ],
  };
}

let router: NativeRouter;
let scanner: NativeUsageScanner;
let shared: NativeSharedData;
let sent = 0;
const chat = (model = "llama", extra: Record<string, unknown> = {}) =>
  JSON.stringify({ model, messages: [{ role: "user", content: `hello ${sent++}` }], ...extra });

beforeAll(async () => {
  router = await NativeRouter.load();
  scanner = await NativeUsageScanner.load();
});

beforeEach(() => {
  router.reset(11);
  shared = new NativeSharedData();
  router.setClock(1_000, 1_000);
});

function endpointOf(r: RouteResult): string {
  if (!("endpoint" in r) || r.endpoint === null) throw new Error(`not routed: ${JSON.stringify(r)}`);
  return r.endpoint;
}

describe("an idle fleet", () => {
  it("refuses nothing in a burst its batch slots can hold, and keeps an adapter on the pod running it", () => {
    shared.install(router, fleet({ runningAdapters: [ADAPTER] }, {}));
    // 256 slots per pod: 400 requests in flight at once still start at once.
    const places: string[] = [];
    for (let i = 0; i < 400; i++) places.push(endpointOf(shared.route(router, chat(i % 2 === 0 ? ADAPTER : "llama"), "chat", {})));
    const adapterPlaces = places.filter((_, i) => i % 2 === 0);
    // 64 adapter requests in flight: the adapter's pod keeps them, until load is real.
    expect(adapterPlaces.slice(0, 64).every((p) => p === A)).toBe(true);
    // Base-model requests balance the load the adapter put on A.
    expect(places.filter((p) => p === B).length).toBeGreaterThan(100);
  });

  it("queues and then refuses only past the slots: what a pod reports waiting, plus what exceeds its free slots", () => {
    shared.install(router, fleet({ batchSlots: 8 }, { batchSlots: 8 }));
    let routed = 0;
    while (routed < 100 && "endpoint" in shared.route(router, chat(), "chat", {})) routed++;
    // 8 slots each start at once; then each queues up to the latency profile's 2 waiting.
    expect(routed).toBe(2 * (8 + latency.admission.maxWaiting));
  });

  it("counts a nearly full KV cache as no room, free slots or not", () => {
    // 92% used (below admission's 95% KV limit): each pod queues up to the waiting limit at once.
    shared.install(router, fleet({ kvCacheUsage: 0.92, running: 3 }, { kvCacheUsage: 0.92, running: 3 }));
    let routed = 0;
    while (routed < 100 && "endpoint" in shared.route(router, chat(), "chat", {})) routed++;
    expect(routed).toBe(2 * latency.admission.maxWaiting);
    // At 97% a pod that queues at all is saturated below Critical.
    shared.install(router, { ...fleet({ kvCacheUsage: 0.97, running: 3 }, { kvCacheUsage: 0.97, running: 3 }), version: 2 });
    routed = 0;
    while (routed < 100 && "endpoint" in shared.route(router, chat(), "chat", {})) routed++;
    expect(routed).toBe(2);
  });
});

describe("requests in flight", () => {
  it("stay counted on a pod however idle its metrics look, across snapshots, until they end", () => {
    shared.install(router, fleet({}, {}));
    const hung: string[] = [];
    for (let i = 0; i < 20; i++) {
      const to = endpointOf(shared.route(router, chat(), "chat", {}));
      if (to === A) hung.push(to);
      else shared.release(router, to);
      // Other pods' metrics move: a new snapshot every request, A still reporting idle.
      shared.install(router, { ...fleet({}, { running: i % 3 }), version: i + 2 });
    }
    // A never answers: its requests pile up in the count, and B, which answers, takes the rest.
    expect(shared.countOf(router, A)).toBe(hung.length);
    expect(hung.length).toBeLessThanOrEqual(3);
    expect(endpointOf(shared.route(router, chat(), "chat", {}))).toBe(B);
  });
});

describe("deadlines to the first byte", () => {
  const deadlines = { firstByteMs: 20_000, promptMsPerKtoken: 500, outputMsPerToken: 100, assumedOutputTokens: 2048 };

  it("grow with the prompt and the output for an answer that is not streamed; a stream has its idle bound instead", () => {
    shared.install(router, fleet({}, {}, deadlines));
    const deadline = (body: string) => {
      const r = shared.route(router, body, "chat", {}) as { endpoint: string; deadlineMs: number };
      shared.release(router, r.endpoint);
      return r.deadlineMs;
    };
    const prompt = "x".repeat(40_000); // ~10k tokens at 4 bytes each: +5 s
    const promptBody = (extra: Record<string, unknown>) => JSON.stringify({ model: "llama", messages: [{ role: "user", content: prompt }], ...extra });
    // A stream gets none: its route's idle bound covers its first byte too.
    expect(deadline(promptBody({ stream: true }))).toBe(0);
    // Not streamed: its first byte is its last, so the prompt and max_tokens (else the assumed output) count.
    const base = 20_000 + 5_000;
    expect(deadline(promptBody({ max_tokens: 100 }))).toBeGreaterThanOrEqual(base + 10_000);
    expect(deadline(promptBody({ max_tokens: 100 }))).toBeLessThan(base + 10_100);
    expect(deadline(promptBody({ max_completion_tokens: 50, max_tokens: 100 }))).toBe(deadline(promptBody({ max_tokens: 100 })) - 5_000);
    expect(deadline(promptBody({}))).toBe(deadline(promptBody({ max_tokens: 100 })) - 10_000 + 204_800);
    // A max_tokens that is not a plain integer is the server's to refuse; the deadline assumes the default.
    expect(deadline(promptBody({ max_tokens: "9".repeat(30) }))).toBe(deadline(promptBody({})));
    expect(deadline(promptBody({ max_tokens: 1e300 }))).toBe(deadline(promptBody({})));
    // A Responses request sizes its output by max_output_tokens.
    const responses = (extra: Record<string, unknown>) => {
      const r = shared.route(router, JSON.stringify({ model: "llama", input: prompt, ...extra }), "responses", {}) as { endpoint: string; deadlineMs: number };
      shared.release(router, r.endpoint);
      return r.deadlineMs;
    };
    expect(responses({ max_output_tokens: 100 })).toBe(responses({}) - 204_800 + 10_000);
    expect(responses({ max_tokens: 100 })).toBe(responses({}));
  });

  it("are capped at an hour, and absent without the profile's", () => {
    shared.install(router, fleet({}, {}, deadlines));
    expect((shared.route(router, chat("llama", { max_tokens: 999_999_999 }), "chat", {}) as { deadlineMs: number }).deadlineMs).toBe(3_600_000);
    shared.install(router, fleet({}, {}));
    expect((shared.route(router, chat(), "chat", {}) as { deadlineMs: number }).deadlineMs).toBe(0);
  });
});

describe("the health ledger", () => {
  it("ejects a pod Envoy had to move a request off at once, and one that fails itself after the threshold", () => {
    router.setHealthRules({ ejectAfter: 3, ejectMs: 10_000 });
    shared.install(router, fleet({}, {}));
    // Routed to A, moved by Envoy to B, which answered.
    expect(shared.endRequest(router, { address: A, status: 200, upstream: B })).toBe(1);
    for (let i = 0; i < 10; i++) expect(endpointOf(shared.route(router, chat(), "chat", {}))).toBe(B);
    expect(shared.endRequest(router, { address: B, status: 500 })).toBe(1);
    expect(shared.endRequest(router, { address: B, status: 502 })).toBe(1);
    // Two failures of B's own: not yet ejected (and A still is, so B it is).
    expect(endpointOf(shared.route(router, chat(), "chat", {}))).toBe(B);
  });
});

describe("how a request's end is judged", () => {
  const UT = 0x4n;
  const UC = 0x40n;
  const DC = 0x4000n;
  /** Ends one request routed to A (failures recorded), then says whether A and B are ejected, each by one failure. */
  function end(spec: { status?: number; upstream?: string; flags?: bigint; stream?: boolean; sawDone?: boolean }) {
    router.reset(7);
    router.setHealthRules({ ejectAfter: 1, ejectMs: 10_000 });
    shared = new NativeSharedData();
    shared.install(router, fleet({}, {}));
    const failures = shared.endRequest(router, { address: A, ...spec });
    const picks = new Set(Array.from({ length: 8 }, () => endpointOf(shared.route(router, chat(), "chat", {}))));
    return { failures, aEjected: !picks.has(A), bEjected: !picks.has(B) };
  }

  it("blames the first pod when Envoy moved the request, and the pod that served it when that failed too", () => {
    expect(end({ status: 200, upstream: B })).toEqual({ failures: 1, aEjected: true, bEjected: false });
    // Both failed: the pool fails open to both.
    expect(end({ status: 502, upstream: B }).failures).toBe(2);
  });

  it("counts a 429 or 503 the pod gave itself as saturation: no failure, the pod passed over for the back-off", () => {
    expect(end({ status: 429 })).toEqual({ failures: 0, aEjected: true, bEjected: false });
    expect(end({ status: 503 })).toEqual({ failures: 0, aEjected: true, bEjected: false });
    // Moved to B, which was full: one failure (A's, moved off); B is only backed off, so both are out and the pool fails open to both.
    expect(end({ status: 429, upstream: B })).toEqual({ failures: 1, aEjected: false, bEjected: false });
  });

  it("counts a deadline, a reset after the headers and a broken stream as failures", () => {
    expect(end({ status: 504, flags: UT }).failures).toBe(1);
    expect(end({ status: 200, flags: UC }).failures).toBe(1);
    expect(end({ status: 200, stream: true, sawDone: false }).failures).toBe(1);
    expect(end({ status: 200, stream: true, sawDone: true })).toEqual({ failures: 0, aEjected: false, bEjected: false });
  });

  it("learns nothing from a stream the client left, nor from a request that got no answer", () => {
    expect(end({ status: 200, flags: DC, stream: true, sawDone: false }).failures).toBe(0);
    expect(end({}).failures).toBe(0);
  });

  it("finds the terminal event at a stream's end, blank lines after it allowed", () => {
    const ends = (chunks: string[]) => scanner.streamEnd(chunks) === "whole";
    expect(ends(["data: {}\n\n", "data: [DONE]\n\n"])).toBe(true);
    expect(ends(["data: {}\n\ndata: [DO", "NE]\r\n\r\n"])).toBe(true);
    expect(ends(["data: {}\n\n"])).toBe(false);
    expect(ends(["data: [DONE] and more\n\n"])).toBe(false);
    expect(ends([])).toBe(false);
  });

  it("finds an error event before the terminal one, split anywhere, and nothing in a model's text that quotes one", () => {
    const errs = (chunks: string[]) => scanner.streamEnd(chunks) === "failed";
    // vLLM's shape (serving_chat.py): the error object as the last data event, then [DONE].
    const vllm = 'data: {"error": {"message": "Engine died", "type": "InternalServerError", "param": null, "code": 500}}\n\ndata: [DONE]\n\n';
    expect(errs(['data: {"choices":[{"delta":{"content":"hi"}}]}\n\n', vllm])).toBe(true);
    for (let cut = 1; cut < vllm.length; cut += 7) expect(errs(["data: {}\n\n" + vllm.slice(0, cut), vllm.slice(cut)])).toBe(true);
    // llama.cpp's: no space after the colon, error without [DONE].
    expect(errs(['data:{"error":{"code":500,"message":"x","type":"server_error"}}\n\n'])).toBe(true);
    expect(errs(['data: {"choices":[{"delta":{"content":"data: {\\"error\\": 1}"}}]}\n\n', "data: [DONE]\n\n"])).toBe(false);
    expect(errs(['data: {"choices":[]}\n\n', "data: [DONE]\n\n"])).toBe(false);
    expect(errs([])).toBe(false);
    // A whole (non-stream) error body is not a stream's error event.
    expect(errs(['{"error": {"message": "x"}}'])).toBe(false);
  });
});
