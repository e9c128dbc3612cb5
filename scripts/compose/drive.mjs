// Drives the docker-compose stack through Envoy with the official `openai`
// client, as an application would, and exits non-zero on the first answer
// that is not what the gateway promises:
//   node scripts/compose/drive.mjs [--url http://127.0.0.1:8080] [--config config/compose.yaml] [--fleet config/compose-fleet.yaml]
//                                  [--metrics-url http://127.0.0.1:9464/metrics]
// Waits (bounded) for the gateway's /health to say "ok" first: the stack is
// started detached and Envoy needs its first snapshot before it routes.
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import OpenAI from "openai";
import { loadGatewayConfig, servedModels } from "../../dist/host/config.js";
import { loadLocalFleet } from "../../dist/testing/fakeserver/local-fleet.js";

const READY_TIMEOUT_MS = 120_000;
const POLL_MS = 500;

const { values } = parseArgs({
  options: {
    url: { type: "string", default: "http://127.0.0.1:8080" },
    config: { type: "string", default: "config/compose.yaml" },
    fleet: { type: "string", default: "config/compose-fleet.yaml" },
    "metrics-url": { type: "string" },
  },
});
const gatewayUrl = values.url.replace(/\/+$/, "");
const config = loadGatewayConfig(values.config);
const fleet = loadLocalFleet(values.fleet, config);

/** Pod names of one pool, from the fake fleet the compose config runs. */
function podsOf(pool) {
  return fleet.filter((p) => p.pool === pool).map((p) => p.name);
}

/**
 * GET with a deadline on a ref'd timer. Not AbortSignal.timeout: its timer
 * does not keep Node alive, and a connection Docker's port proxy accepts
 * while the container is still starting can leave fetch pending with nothing
 * else to wait on, so Node would exit 0 with the checks half done.
 */
async function get(url, timeoutMs) {
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
  try {
    const res = await fetch(url, { signal: abort.signal });
    return { status: res.status, body: await res.text() };
  } finally {
    clearTimeout(timer);
  }
}

async function health() {
  try {
    return await get(`${gatewayUrl}/health`, 2_000);
  } catch (err) {
    return { status: 0, body: err.cause?.code ?? err.cause?.message ?? err.message };
  }
}

async function waitUntilReady() {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  let last;
  while (Date.now() < deadline) {
    last = await health();
    if (last.status === 200 && JSON.parse(last.body).status === "ok") return;
    await sleep(POLL_MS);
  }
  throw new Error(`gateway not ready after ${READY_TIMEOUT_MS / 1000} s: last /health ${last.status} ${last.body}`);
}

/** Runs one check, printing its outcome; the first failure ends the run. */
async function check(name, fn) {
  const start = Date.now();
  const detail = await fn();
  console.log(`ok   ${name} (${Date.now() - start} ms)${detail ? `: ${detail}` : ""}`);
}

/** The API error a call must end in; fails if it succeeds. */
async function apiError(call) {
  try {
    await call();
  } catch (err) {
    if (err instanceof OpenAI.APIError) return err;
    throw err;
  }
  assert.fail("the request succeeded; expected an error answer");
}

async function main() {
  await waitUntilReady();
  // No retries: each answer must be right the first time.
  const client = new OpenAI({ baseURL: `${gatewayUrl}/v1`, apiKey: "unused", maxRetries: 0, timeout: 30_000 });
  const [llama, qwen] = ["llama", "qwen"].map((name) => config.pools.find((p) => p.name === name));
  assert.ok(llama && qwen, `${values.config} must have pools llama and qwen`);

  await check("models.list names every served model", async () => {
    const ids = [];
    for await (const model of client.models.list()) ids.push(model.id);
    assert.deepEqual(ids.sort(), [...servedModels(config.pools).keys()].sort());
    return ids.join(", ");
  });

  await check("chat completion routed to a pod of its pool", async () => {
    const { data, response } = await client.chat.completions
      .create({ model: llama.baseModel, messages: [{ role: "user", content: "Hello" }], max_tokens: 8 })
      .withResponse();
    assert.equal(data.object, "chat.completion");
    assert.equal(data.model, llama.baseModel);
    assert.ok(data.choices[0].message.content, "empty answer");
    assert.ok(data.usage.completion_tokens > 0, "no usage");
    const pod = response.headers.get("x-served-by");
    assert.ok(podsOf(llama.name).includes(pod), `served by ${pod}, not a pod of pool ${llama.name}`);
    return `${data.usage.completion_tokens} tokens from ${pod}`;
  });

  await check("streamed completion arrives in chunks and finishes", async () => {
    const { data: stream, response } = await client.chat.completions
      .create({ model: qwen.baseModel, messages: [{ role: "user", content: "Count to five" }], max_tokens: 16, stream: true })
      .withResponse();
    let chunks = 0;
    let text = "";
    let finish = null;
    for await (const chunk of stream) {
      chunks += 1;
      text += chunk.choices[0]?.delta?.content ?? "";
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.ok(chunks > 1, `only ${chunks} chunk(s)`);
    assert.ok(text.length > 0, "no streamed text");
    assert.ok(finish, "the stream never gave a finish_reason");
    const pod = response.headers.get("x-served-by");
    assert.ok(podsOf(qwen.name).includes(pod), `served by ${pod}, not a pod of pool ${qwen.name}`);
    return `${chunks} chunks from ${pod}, finish_reason ${finish}`;
  });

  await check("a request without messages is a 400 in the OpenAI error format", async () => {
    const err = await apiError(() => client.chat.completions.create({ model: llama.baseModel }));
    assert.equal(err.status, 400);
    assert.equal(err.type, "invalid_request_error");
    assert.equal(err.param, "messages");
    assert.match(err.message, /messages/);
    return err.message;
  });

  await check("an unknown model is a 404 model_not_found", async () => {
    const err = await apiError(() =>
      client.chat.completions.create({ model: "no-such-model", messages: [{ role: "user", content: "Hi" }] }),
    );
    assert.equal(err.status, 404);
    assert.equal(err.code, "model_not_found");
    return err.message;
  });
}

/** Every configured endpoint is scraped and fresh in the aggregator's own /metrics. */
async function checkAggregatorMetrics(url) {
  await check("the aggregator's /metrics has every endpoint fresh", async () => {
    const res = await get(url, 5_000);
    assert.equal(res.status, 200);
    const fresh = res.body.split("\n").filter((line) => line.startsWith("llm_gateway_endpoint_fresh{"));
    const endpoints = config.pools.flatMap((p) => p.endpoints);
    for (const ep of endpoints) {
      // A DNS name stands for each of its addresses, labelled name:port@ip.
      const named = (line) => line.includes(`"${ep}"`) || line.includes(`"${ep}@`);
      assert.ok(fresh.some((line) => named(line) && line.endsWith(" 1")), `${ep} not fresh: ${fresh.join("; ")}`);
    }
    return `${endpoints.length} endpoints`;
  });
}

// Fail closed: leaving without having said that every check passed is a failure.
let passed = false;
process.on("exit", (code) => {
  if (code === 0 && !passed) {
    console.error("drive: FAILED: exited before the checks finished (a request was left pending)");
    process.exitCode = 1;
  }
});

main()
  .then(() => values["metrics-url"] && checkAggregatorMetrics(values["metrics-url"]))
  .then(
    () => {
      passed = true;
      console.log("drive: every check passed");
    },
    (err) => {
      console.error(`drive: FAILED: ${err.stack ?? err}`);
      process.exit(1);
    },
  );
