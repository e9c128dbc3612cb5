// Slow and hostile clients against a real Envoy with the gateway's limits:
// the slow-upload attack (testing/slow-upload) leaves Envoy's resident set
// under a bound while normal clients are served, what is refused gets an
// OpenAI-format error, a whole 4 MB body still passes, stalled headers time
// out, and CONNECT is answered at once.
import net from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { slowUploadAttack } from "../../testing/slow-upload/attack.js";
import { startTestStack, type TestStack } from "../helpers/stack.js";

/** The bound docs/security-edge.md states for the default limits (a 256 MiB heap, plus Envoy's own ~100 MiB and the monitor's lag). */
const RSS_BOUND_BYTES = 300 * 1024 * 1024;
const HEADERS_TIMEOUT_MS = 1000;
let stack: TestStack;
let target: string;

beforeAll(async () => {
  stack = await startTestStack(
    [{ name: "llama", baseModel: "llama-3.1-8b", pods: [{ name: "llama-a" }] }],
    { limits: { requestHeadersTimeoutMs: HEADERS_TIMEOUT_MS } },
  );
  target = stack.envoy.listenerAddresses.llm_gateway;
}, 60_000);

afterAll(async () => {
  await stack?.close();
});

function expectOpenAiError(body: string): void {
  const json = JSON.parse(body);
  expect(Object.keys(json)).toEqual(["error"]);
  expect(json.error).toMatchObject({ message: expect.any(String), type: expect.any(String), code: expect.any(String) });
}

/** Writes `request` on a fresh connection; the first response's status and body, and how long it took. */
function rawExchange(request: string, timeoutMs: number): Promise<{ status: number; body: string; ms: number }> {
  const at = target.lastIndexOf(":");
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const socket = net.connect(Number(target.slice(at + 1)), target.slice(0, at));
    let text = "";
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no answer within ${timeoutMs} ms: ${JSON.stringify(text)}`));
    }, timeoutMs);
    socket.on("data", (d) => {
      text += d.toString("latin1");
      const head = text.indexOf("\r\n\r\n");
      const length = Number(/content-length: (\d+)/i.exec(text)?.[1] ?? NaN);
      if (head >= 0 && text.length >= head + 4 + length) {
        clearTimeout(timer);
        socket.destroy();
        resolve({ status: Number(text.slice(9, 12)), body: text.slice(head + 4, head + 4 + length), ms: performance.now() - started });
      }
    });
    socket.on("error", reject);
    socket.write(request);
  });
}

describe("bounded memory under slow and hostile clients", () => {
  it("still takes a whole 4 MB request body to a pod", async () => {
    const content = "a".repeat(4_000_000 - 200);
    const r = await fetch(`http://${target}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "llama-3.1-8b", messages: [{ role: "user", content }], max_tokens: 1 }),
    });
    // The pod itself answers (a fake pod's context is far shorter than 4 MB of prompt).
    expect(r.headers.get("x-served-by")).toBe("llama-a");
    expect((await r.json()).error.code).toBe("context_length_exceeded");
  });

  it("keeps Envoy under the RSS bound through the slow-upload attack while normal clients are served", async () => {
    const result = await slowUploadAttack({ target, envoyPid: stack.envoy.pid, model: "llama-3.1-8b", connections: 150, holdMs: 8_000 });
    expect(result.peakRssBytes).toBeLessThan(RSS_BOUND_BYTES);
    expect(result.normal["200"] ?? 0).toBeGreaterThan(0);
    // Every attacker was refused or cut, each with an OpenAI error, or is still held within the bound.
    const answered = Object.keys(result.attack).filter((k) => /^\d+$/.test(k));
    expect(answered.length).toBeGreaterThan(0);
    for (const status of answered) {
      expect(Number(status)).toBeGreaterThanOrEqual(400);
      expectOpenAiError(result.attackBodies[status]);
    }
    // Afterwards a normal request is served at once.
    const r = await fetch(`http://${target}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "llama-3.1-8b", messages: [{ role: "user", content: "hi" }], max_tokens: 1 }),
    });
    expect(r.status).toBe(200);
  }, 90_000);

  it("answers headers that never finish with a 408 in OpenAI format", async () => {
    const r = await rawExchange("POST /v1/chat/completions HTTP/1.1\r\nhost: gateway\r\ncontent-type: appl", HEADERS_TIMEOUT_MS * 5);
    expect(r.status).toBe(408);
    expectOpenAiError(r.body);
    expect(r.ms).toBeGreaterThanOrEqual(HEADERS_TIMEOUT_MS * 0.9);
  });

  it("answers a bare CONNECT at once with a 405 in OpenAI format", async () => {
    const r = await rawExchange("CONNECT example.com:443 HTTP/1.1\r\nhost: example.com:443\r\n\r\n", 2_000);
    expect(r.status).toBe(405);
    expectOpenAiError(r.body);
    expect(JSON.parse(r.body).error.code).toBe("method_not_allowed");
  });
});
