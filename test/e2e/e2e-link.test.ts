// The singleton link between Envoy and the aggregator: when the aggregator
// goes away and comes back, Envoy reconnects by itself and routes by the new
// snapshots; while it is away, requests are still served from the last one.
import OpenAI from "openai";
import { afterAll, beforeAll, expect, it } from "vitest";
import { startAggregator, type Aggregator } from "../../host/aggregator/index.js";
import { onEveryWorker } from "../helpers/connections.js";
import { stablePort, startTestStack, type TestStack } from "../helpers/stack.js";

let stack: TestStack;
let replacement: Aggregator | null = null;

beforeAll(async () => {
  stack = await startTestStack([
    { name: "llama", baseModel: "llama-3.1-8b", pods: [{ name: "llama-a" }] },
    { name: "qwen", baseModel: "qwen3-32b", pods: [{ name: "qwen-a" }] },
  ], {}, { aggregatorPort: await stablePort() });
});

afterAll(async () => {
  await replacement?.close();
  await stack?.close();
});

async function modelIds(): Promise<string[]> {
  const r = await fetch(`${stack.gatewayUrl}/v1/models`);
  return ((await r.json()) as { data: { id: string }[] }).data.map((m) => m.id).sort();
}

it("serves from the last snapshot while the aggregator is down, then reconnects", async () => {
  const client = new OpenAI({ baseURL: `${stack.gatewayUrl}/v1`, apiKey: "x", maxRetries: 0 });
  const port = stack.aggregator.grpcPort;
  await stack.aggregator.close();

  const r = await client.chat.completions.create({ model: "qwen3-32b", messages: [{ role: "user", content: "hi" }], max_tokens: 2 });
  expect(r.choices[0].message.content).toBeTruthy();

  // Bring an aggregator back on the same port with a config that drops qwen.
  const config = { ...stack.config, pools: stack.config.pools.filter((p) => p.name === "llama") };
  replacement = await startAggregator(config, { port, metricsPort: false, log: () => {} });
  await onEveryWorker(stack, "the new aggregator's snapshot", async (c) => (await c.get("/v1/models")).json.data.length === 1, 15_000);
  expect(await modelIds()).toEqual(["llama-3.1-8b"]);
  const err = await client.chat.completions.create({ model: "qwen3-32b", messages: [], max_tokens: 1 }).catch((e) => e);
  expect(err.status).toBe(404);
});

it("shuts down without a Wasm trap in plugin teardown", async () => {
  await stack.envoy.stop();
  const failures = stack.envoy.recentLogs().filter((line) => /wasm abort|unreachable|Function: proxy_on_\w+ failed|RuntimeError/i.test(line));
  expect(failures).toEqual([]);
  // Logs were captured at all (the warning about the dropped stream is there).
  expect(stack.envoy.recentLogs().some((line) => line.includes("aggregator stream closed"))).toBe(true);
});
