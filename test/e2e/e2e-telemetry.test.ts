// Envoy's JSON access log and OpenTelemetry tracer on a real stack: spans
// reach a real OTLP/gRPC receiver with the decision as attributes, and each
// request's log line names its model, pool, pod and class.
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { otlpReceiverAvailable, startOtlpReceiver } from "../helpers/otlp-receiver.js";
import { skipWithout } from "../helpers/requirements.js";
import { startTestStack, waitFor, type TestStack } from "../helpers/stack.js";

const skip = skipWithout(otlpReceiverAvailable(), "telemetry", "no grpcio + opentelemetry-proto in .venv (pip install -r testing/otlp-receiver/requirements.txt)");
const dir = mkdtempSync(join(tmpdir(), "gw-telemetry-"));
const logPath = join(dir, "access.log");
// Envoy's tracer sends once it holds 5 spans (or every 5 s).
const REQUESTS = 6;
const MAX_TOKENS = 3;
let receiver: Awaited<ReturnType<typeof startOtlpReceiver>>;
let stack: TestStack;

type LogLine = Record<string, string | number>;
const logLines = (): LogLine[] =>
  existsSync(logPath) ? readFileSync(logPath, "utf8").split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l) as LogLine) : [];

describe.skipIf(skip)("access log and tracing", () => {
  beforeAll(async () => {
    receiver = await startOtlpReceiver();
    stack = await startTestStack([{ name: "llama", baseModel: "llama-3.1-8b", pods: [{ name: "llama-a" }, { name: "llama-b" }] }], {
      accessLog: { path: logPath },
      tracing: { host: "127.0.0.1", port: receiver.port, serviceName: "gw-test", samplingPercent: 100 },
    });
    const client = new OpenAI({ baseURL: `${stack.gatewayUrl}/v1`, apiKey: "unused", maxRetries: 0, defaultHeaders: { "x-llm-priority": "sheddable" } });
    for (let i = 0; i < REQUESTS; i++) {
      await client.chat.completions.create({ model: "llama-3.1-8b", messages: [{ role: "user", content: `hi ${i}` }], max_tokens: MAX_TOKENS });
    }
  });

  afterAll(async () => {
    await stack?.close();
    await receiver?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("sends spans over OTLP/gRPC with the decision as attributes", async () => {
    await waitFor(`${REQUESTS} spans at the receiver`, () => receiver.spans().length >= REQUESTS, 15_000).catch(async (err) => {
      // Envoy's side of it: spans sent, and its calls to the collector's cluster.
      const stats = await stack.envoy.stats("tracing|llm_gateway_otlp.upstream_rq");
      throw new Error(`${(err as Error).message}; received ${receiver.spans().length}; Envoy: ${JSON.stringify(stats)}`);
    });
    const pods = stack.fleet.pods.map((p) => p.address);
    for (const span of receiver.spans()) {
      expect(span.service).toBe("gw-test");
      expect(span.attributes).toMatchObject({ "llm_gateway.pool": "llama", "llm_gateway.model": "llama-3.1-8b", "llm_gateway.class": "sheddable" });
      // The chosen pod first, then its fallbacks.
      expect(pods).toContain(String(span.attributes["llm_gateway.pod"]).split(",")[0]);
      expect(span.attributes["http.status_code"]).toBe("200");
    }
  });

  it("writes one JSON line per request with model, pool, pod, class, status, timings and tokens, its trace id the span's", async () => {
    await waitFor(`${REQUESTS} access log lines`, () => logLines().length >= REQUESTS, 10_000);
    const pods = stack.fleet.pods.map((p) => p.address);
    const traceIds = new Set(receiver.spans().map((s) => s.trace_id));
    for (const line of logLines()) {
      expect(line).toMatchObject({ method: "POST", path: "/v1/chat/completions", status: 200, model: "llama-3.1-8b", base_model: "llama-3.1-8b", pool: "llama", class: "sheddable" });
      expect(pods).toContain(line.upstream_host);
      expect(String(line.chosen).split(",")[0]).toBe(line.upstream_host);
      expect(String(line.request_id)).toMatch(/^[0-9a-f-]{36}$/);
      for (const field of ["decision_us", "first_byte_ms", "duration_ms"]) expect(line[field]).toBeTypeOf("number");
      expect(traceIds.has(String(line.trace_id))).toBe(true);
      // The answer's usage, as the filter read it.
      const tokens = JSON.parse(String(line.tokens)) as { prompt_tokens: number; completion_tokens: number };
      expect(tokens.prompt_tokens).toBeGreaterThan(0);
      expect(tokens.completion_tokens).toBe(MAX_TOKENS);
    }
  });
});
