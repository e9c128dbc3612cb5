// Traffic management as the filter carries it out, on the proxy-wasm
// emulator: the routing headers, a canary's rewritten body and its
// content-length, a 429's Retry-After, and the counters per class, reason
// and pod.
import { beforeEach, describe, expect, it } from "vitest";
import type { SnapshotMsg } from "../../host/proto.js";
import { endpoint, pool } from "../../testing/fixtures/snapshot-builders.js";
import { EmulatedGateway } from "../helpers/emulated-gateway.js";

const START_MS = 1_700_000_000_000;
const ADMIT = { enabled: true, maxWaiting: 4, maxKvCache: 0.95, sheddableFactor: 0.5, criticalFactor: 2, maxRetryAfterS: 60 };
const WEIGHTS = { queue: 2, kvCache: 1, running: 1, lora: 0, prefix: 0 };

/** Pods whose batch of 4 is full, with `waiting` queued: what they are sent queues. */
function fleet(waiting: number): SnapshotMsg {
  const full = { waiting, running: 4, batchSlots: 4 };
  return {
    version: 1,
    generatedUnixMs: 0,
    pools: [
      pool("p", "llama-3.1-8b", [endpoint("10.0.0.1:80", full), endpoint("10.0.0.2:80", full)], WEIGHTS),
      pool("q", "llama-3.2-8b", [endpoint("10.0.0.3:80", full)], WEIGHTS),
    ],
    profiles: [{ name: "latency", weights: WEIGHTS, admission: ADMIT }],
    models: [
      { name: "llama-3.1-8b", pool: 0, adapter: "", profile: 0, priority: "STANDARD", splits: [] },
      { name: "llama-3.2-8b", pool: 1, adapter: "", profile: 0, priority: "STANDARD", splits: [] },
      { name: "llama", pool: 0, adapter: "", profile: 0, priority: "STANDARD", splits: [{ model: 0, weight: 1 }, { model: 1, weight: 1 }] },
    ],
  } as SnapshotMsg;
}

function post(body: string, headers: Record<string, string> = {}) {
  return { headers: { ":method": "POST", ":path": "/v1/chat/completions", "content-length": String(Buffer.byteLength(body)), ...headers }, body };
}

const chat = (model: string) => JSON.stringify({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 5 });

let gateway: EmulatedGateway;
beforeEach(() => {
  gateway = new EmulatedGateway({ startMs: START_MS });
});

describe("routing headers and canary rewrites", () => {
  it("sets the model-name and base-model headers Envoy's routes can match", () => {
    gateway.publish(fleet(0));
    gateway.host.tick();
    const stream = gateway.request(post(chat("llama-3.1-8b")));
    expect(stream.requestHeaders.get("x-gateway-pool")).toBe("p");
    expect(stream.requestHeaders.get("x-gateway-model-name")).toBe("llama-3.1-8b");
    expect(stream.requestHeaders.get("x-gateway-base-model")).toBe("llama-3.1-8b");
    // Unchanged bodies are sent as they came.
    expect(Buffer.from(stream.forwardedBody).toString()).toBe(chat("llama-3.1-8b"));
  });

  it("sends a split model's request as its target: body rewritten, content-length to match, in the target's pool", () => {
    gateway.publish(fleet(0));
    gateway.host.tick();
    // Duplicate keys: the server reads the last "model", so that is the one rewritten.
    const body = '{"model":"x","messages":[{"role":"user","content":"hi"}],"model":"llama","stream":false}';
    const served: string[] = [];
    for (let i = 0; i < 4; i++) {
      const stream = gateway.request(post(body), 0);
      const sent = Buffer.from(stream.forwardedBody).toString();
      const parsed = JSON.parse(sent);
      served.push(parsed.model);
      expect(stream.requestHeaders.get("content-length")).toBe(String(Buffer.byteLength(sent)));
      expect(sent).toBe(body.replace('"model":"llama"', `"model":"${parsed.model}"`));
      expect(stream.requestHeaders.get("x-gateway-model-name")).toBe("llama");
      expect(stream.requestHeaders.get("x-gateway-pool")).toBe(parsed.model === "llama-3.1-8b" ? "p" : "q");
      expect(stream.requestHeaders.get("x-gateway-base-model")).toBe(parsed.model);
      stream.finish({ responseCode: 200 });
    }
    expect(served.sort()).toEqual(["llama-3.1-8b", "llama-3.1-8b", "llama-3.2-8b", "llama-3.2-8b"]);
    gateway.host.tick();
    expect(gateway.host.metric("llm_gateway.canary_served_total;model=llama;target=llama-3.1-8b")).toBe(2);
    expect(gateway.host.metric("llm_gateway.canary_served_total;model=llama;target=llama-3.2-8b")).toBe(2);
    expect(gateway.host.metric("llm_gateway.requests_routed_total;pool=p;model=llama-3.1-8b")).toBe(2);
    expect(gateway.host.metric("llm_gateway.requests_routed_total;pool=q;model=llama-3.2-8b")).toBe(2);
  });

  it("rewrites a body that arrived in several chunks, and one without content-length (chunked)", () => {
    gateway.publish(fleet(0));
    gateway.host.tick();
    const body = chat("llama");
    const chunked = gateway.request({ ...post(body), chunks: 4 });
    expect(JSON.parse(Buffer.from(chunked.forwardedBody).toString()).model).toMatch(/^llama-3\.[12]-8b$/);
    const spec = post(body);
    delete (spec.headers as Record<string, string>)["content-length"];
    const noLength = gateway.request(spec);
    expect(JSON.parse(Buffer.from(noLength.forwardedBody).toString()).model).toMatch(/^llama-3\.[12]-8b$/);
    expect(noLength.requestHeaders.get("content-length")).toBeUndefined();
  });
});

describe("admission in the filter", () => {
  it("answers 429 in the OpenAI format with Retry-After, and counts it per class and reason", () => {
    gateway.publish(fleet(3));
    gateway.host.tick();
    const refused = gateway.request(post(chat("llama-3.1-8b"), { "x-llm-priority": "sheddable" }));
    expect(refused.localResponse?.status).toBe(429);
    const headers = Object.fromEntries(refused.localResponse!.headers);
    expect(headers["retry-after"]).toMatch(/^[1-9]\d*$/);
    expect(headers).not.toHaveProperty("x-gateway-decision");
    expect(JSON.parse(refused.localResponse!.body)).toMatchObject({ error: { type: "rate_limit_error", code: "pool_saturated" } });
    refused.finish();

    const standard = gateway.request(post(chat("llama-3.1-8b")));
    expect(standard.localResponse).toBeUndefined();
    standard.finish({ responseCode: 200 });
    // Asking for Critical is ignored when the config lets nobody claim it (the default).
    const claimed = gateway.request(post(chat("llama-3.1-8b"), { "x-llm-priority": "critical" }));
    expect(claimed.localResponse).toBeUndefined();
    claimed.finish({ responseCode: 200 });
    const bad = gateway.request(post(chat("llama-3.1-8b"), { "x-llm-priority": "urgent" }));
    expect(bad.localResponse?.status).toBe(400);

    gateway.host.tick();
    const m = (name: string) => gateway.host.metric(`llm_gateway.${name}`);
    expect(m("class_refused_total;class=sheddable")).toBe(1);
    expect(m("class_admitted_total;class=standard")).toBe(2);
    expect(m("critical_downgraded_total")).toBe(1);
    expect(m("requests_refused_total;status=429;reason=pool_saturated")).toBe(1);
    expect(m("requests_refused_total;status=400;reason=invalid_request")).toBe(1);
    expect(m("requests_routed_total;pool=p;model=llama-3.1-8b")).toBe(2);
    expect(m("pod_picks_total;pool=p;model_server=10.0.0.1:80") + m("pod_picks_total;pool=p;model_server=10.0.0.2:80")).toBe(2);
  });

  it("releases a routed request's count and feeds the drain rate whatever the answer was", () => {
    gateway.publish(fleet(0));
    gateway.host.tick();
    const streams = Array.from({ length: 8 }, () => gateway.request(post(chat("llama-3.1-8b"))));
    // Both pods now hold 4 sent-since-scrape requests: the ninth is refused.
    const ninth = gateway.request(post(chat("llama-3.1-8b")));
    expect(ninth.localResponse?.status).toBe(429);
    streams[0].finish({ responseCode: 500 });
    const tenth = gateway.request(post(chat("llama-3.1-8b")));
    expect(tenth.localResponse).toBeUndefined();
  });
});
