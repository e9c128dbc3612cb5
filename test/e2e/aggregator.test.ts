import http from "node:http";
import type { AddressInfo } from "node:net";
import * as grpc from "@grpc/grpc-js";
import { afterEach, describe, expect, it } from "vitest";
import { DEFAULT_WEIGHTS, parseGatewayConfig, type GatewayConfig } from "../../host/config.js";
import { startAggregator, type Aggregator, type Snapshot } from "../../host/aggregator/index.js";
import { normalise } from "../../host/aggregator/normalise.js";
import { parsePrometheusText } from "../../host/aggregator/scrape.js";
import { startFleet } from "../../testing/fakeserver/index.js";
import { snapshotServiceDefinition } from "../../host/proto.js";

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

// ---- fake pods: real HTTP servers serving metric text we control -----------

interface Pod {
  port: number;
  /** The page, or the page of the n-th 200 answer (from 1): a snapshot then tells which answer it holds. */
  body: string | ((n: number) => string);
  /** ok: 200 with body; hang: never answer (the scrape times out); error: HTTP 500. */
  mode: "ok" | "hang" | "error";
  hits: number;
  /** Date.now() of every 200 answer: the n-th at [n - 1]. */
  answeredAt: number[];
}

async function startPod(body: Pod["body"]): Promise<Pod> {
  const pod: Pod = { port: 0, body, mode: "ok", hits: 0, answeredAt: [] };
  const server = http.createServer((req, res) => {
    pod.hits++;
    if (req.url !== "/metrics") res.writeHead(404).end();
    else if (pod.mode === "ok") {
      const n = pod.answeredAt.push(Date.now());
      res.writeHead(200, { "content-type": "text/plain; version=0.0.4" }).end(typeof pod.body === "string" ? pod.body : pod.body(n));
    }
    else if (pod.mode === "error") res.writeHead(500).end("boom");
    // hang: leave the request open
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  pod.port = (server.address() as AddressInfo).port;
  cleanups.push(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  return pod;
}

interface VllmState {
  waiting: number | number[]; // an array = one value per DP engine
  running: number;
  kv: number;
  lora?: { max: number; running: string; waiting: string };
}

function vllmText(s: VllmState): string {
  const waiting = Array.isArray(s.waiting) ? s.waiting : [s.waiting];
  return [
    "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
    "# TYPE vllm:num_requests_waiting gauge",
    ...waiting.map((w, i) => `vllm:num_requests_waiting{engine="${i}",model_name="llama-3.1-8b"} ${w.toFixed(1)}`),
    `vllm:num_requests_running{engine="0",model_name="llama-3.1-8b"} ${s.running.toFixed(1)}`,
    `vllm:kv_cache_usage_perc{engine="0",model_name="llama-3.1-8b"} ${s.kv}`,
    // Noise the parser has to step over: histograms, escaped quotes, NaN/Inf.
    `vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="llama-3.1-8b"} 42.0`,
    `vllm:cache_config_info{block_size="16",note="say \\"hi\\"",num_gpu_blocks="2048"} 1.0`,
    "process_open_fds NaN",
    ...(s.lora
      ? [
          // An older series that must lose against the newest one.
          `vllm:lora_requests_info{max_lora="2",running_lora_adapters="old-lora",waiting_lora_adapters=""} 1.7e+09`,
          `vllm:lora_requests_info{max_lora="${s.lora.max}",running_lora_adapters="${s.lora.running}",waiting_lora_adapters="${s.lora.waiting}"} 1.7382173358407154e+09`,
        ]
      : []),
    "",
  ].join("\n");
}

const sglangText = (queue: number, running: number, usage: number) =>
  `# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{model_name="qwen3-32b"} ${queue}\nsglang:num_running_reqs{model_name="qwen3-32b"} ${running}\nsglang:token_usage{model_name="qwen3-32b"} ${usage}\nsglang:cache_hit_rate{model_name="qwen3-32b"} 0.5\n`;

const tgiText = (queue: number, batch: number) =>
  `# TYPE tgi_queue_size gauge\ntgi_queue_size ${queue}\ntgi_batch_current_size ${batch}\ntgi_batch_current_max_tokens 4096\n`;

// ---- gRPC client -----------------------------------------------------------

interface Watcher {
  /** Snapshots in the order they came; heartbeats (version 0, empty) left out, as one comes after every second of silence. */
  messages: Snapshot[];
  call: grpc.ClientDuplexStream<unknown, Snapshot>;
}

const SnapshotService = grpc.makeGenericClientConstructor(snapshotServiceDefinition, "SnapshotService");

function watch(port: number, client = "test"): Watcher {
  const conn = new SnapshotService(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  const call = conn["Watch"]() as grpc.ClientDuplexStream<unknown, Snapshot>;
  const w: Watcher = { messages: [], call };
  call.on("data", (s: Snapshot) => s.version && w.messages.push(s));
  call.on("error", () => {}); // CANCELLED after our own cancel()
  call.write({ client, haveVersion: 0 });
  cleanups.push(() => {
    call.cancel();
    conn.close();
  });
  return w;
}

/** Polls until `probe` returns a value (not undefined/false); the deadline only bounds a failing test. */
async function waitFor<T>(what: string, probe: () => T | undefined | false | Promise<T | undefined | false>, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

const last = (w: Watcher) => w.messages[w.messages.length - 1];

async function aggregatorMetrics(agg: Aggregator): Promise<string> {
  const res = await fetch(`http://127.0.0.1:${agg.metricsPort}/metrics`);
  expect(res.status).toBe(200);
  return res.text();
}

// ---- the stack under test --------------------------------------------------

interface Stack {
  agg: Aggregator;
  config: GatewayConfig;
  llamaA: Pod;
  llamaB: Pod;
  qwen: Pod;
  flan: Pod;
}

/**
 * Scrape timeout and staleness bound far beyond any stall of a loaded
 * machine: unless a test is about staleness, no pod may go stale under it
 * (a new version then, and fresh: false) however slowly it runs.
 */
const SLOW_MACHINE_PROOF = { scrapeTimeoutMs: 5_000, staleAfterMs: 30_000 };

async function startStack(timing: { scrapeTimeoutMs: number; staleAfterMs: number } = SLOW_MACHINE_PROOF): Promise<Stack> {
  const llamaA = await startPod(vllmText({ waiting: 3, running: 7, kv: 0.41, lora: { max: 4, running: "sql-lora,chat-lora", waiting: "" } }));
  const llamaB = await startPod(vllmText({ waiting: [2, 3], running: 1, kv: 0.125, lora: { max: 4, running: "", waiting: "sql-lora" } }));
  const qwen = await startPod(sglangText(4, 9, 0.875));
  const flan = await startPod(tgiText(6, 2));
  const config = parseGatewayConfig(
    `
aggregator: { host: 127.0.0.1, port: 0, metricsPort: 0, scrapeIntervalMs: 20, scrapeTimeoutMs: ${timing.scrapeTimeoutMs}, staleAfterMs: ${timing.staleAfterMs} }
pools:
  - name: llama
    baseModel: llama-3.1-8b
    engine: vllm
    adapters: [sql-lora, chat-lora]
    weights: { lora: 1.5 }
    endpoints: ["127.0.0.1:${llamaA.port}", "127.0.0.1:${llamaB.port}"]
  - name: qwen
    baseModel: qwen3-32b
    engine: sglang
    endpoints: ["127.0.0.1:${qwen.port}"]
  - name: flan
    baseModel: flan-t5
    engine: tgi
    endpoints: ["localhost:${flan.port}"]   # a DNS name: must reach the snapshot as an IP literal
`,
    "test.yaml",
  );
  const agg = await startAggregator(config, { port: 0, metricsPort: 0, log: () => {} });
  cleanups.push(() => agg.close());
  return { agg, config, llamaA, llamaB, qwen, flan };
}

const endpointOf = (s: Snapshot, pool: number, port: number) => s.pools[pool].endpoints.find((e) => e.address.endsWith(`:${port}`));

describe("aggregator", () => {
  it("sends the current snapshot at once, with normalised vLLM, SGLang and TGI values", async () => {
    const { agg, llamaA, llamaB, qwen, flan } = await startStack();
    const w = watch(agg.grpcPort);
    const first = await waitFor("first snapshot", () => last(w));

    expect(first.version).toBe(agg.current().version);
    expect(first.generatedUnixMs).toBeGreaterThan(Date.now() - 60_000);
    // The llama pool's own weights make its models' profile "latency@llama"; the others use "latency".
    const traffic = { priority: 0, splits: [] };
    expect(first.models).toEqual([
      { name: "llama-3.1-8b", pool: 0, adapter: "", profile: 0, ...traffic },
      { name: "sql-lora", pool: 0, adapter: "sql-lora", profile: 0, ...traffic },
      { name: "chat-lora", pool: 0, adapter: "chat-lora", profile: 0, ...traffic },
      { name: "qwen3-32b", pool: 1, adapter: "", profile: 1, ...traffic },
      { name: "flan-t5", pool: 2, adapter: "", profile: 1, ...traffic },
    ]);
    expect(first.profiles?.map((p) => p.name)).toEqual(["latency@llama", "latency"]);
    expect(first.pools.map((p) => [p.name, p.baseModel])).toEqual([
      ["llama", "llama-3.1-8b"],
      ["qwen", "qwen3-32b"],
      ["flan", "flan-t5"],
    ]);
    expect(first.pools[0].weights).toEqual({ ...DEFAULT_WEIGHTS, lora: 1.5 });

    const a = first.pools[0].endpoints[0];
    expect(a).toMatchObject({ address: `127.0.0.1:${llamaA.port}`, waiting: 3, running: 7, fresh: true, maxLora: 4 });
    expect(a.kvCacheUsage).toBeCloseTo(0.41, 5); // a proto float
    expect(a.runningAdapters).toEqual(["chat-lora", "sql-lora"]);
    expect(a.waitingAdapters).toEqual([]);

    const b = first.pools[0].endpoints[1];
    expect(b).toMatchObject({ address: `127.0.0.1:${llamaB.port}`, waiting: 5, running: 1, kvCacheUsage: 0.125, fresh: true });
    expect(b.runningAdapters).toEqual([]);
    expect(b.waitingAdapters).toEqual(["sql-lora"]);

    const q = first.pools[1].endpoints[0];
    expect(q).toMatchObject({ address: `127.0.0.1:${qwen.port}`, waiting: 4, running: 9, kvCacheUsage: 0.875, fresh: true, maxLora: 0 });

    const f = first.pools[2].endpoints[0];
    expect(f).toMatchObject({ address: `127.0.0.1:${flan.port}`, waiting: 6, running: 2, kvCacheUsage: 0, fresh: true });
  });

  it("pushes a higher version when metrics change, and nothing while they do not", async () => {
    const { agg, llamaA, llamaB, qwen, flan } = await startStack();
    const seen: number[] = [];
    agg.onSnapshot((s) => seen.push(s.version));
    const w = watch(agg.grpcPort);
    const first = await waitFor("first snapshot", () => last(w));

    // Several full scrape rounds of identical metrics: no new version.
    const pods = [llamaA, llamaB, qwen, flan];
    const before = pods.map((p) => p.hits);
    await waitFor("5 more scrapes of every pod", () => pods.every((p, i) => p.hits >= before[i] + 5));
    expect(w.messages).toHaveLength(1);
    expect(agg.current().version).toBe(first.version);
    expect(seen).toEqual([]);

    qwen.body = sglangText(11, 9, 0.875);
    const changed = await waitFor("snapshot with qwen waiting=11", () => w.messages.find((s) => s.pools[1].endpoints[0].waiting === 11));
    expect(changed.version).toBeGreaterThan(first.version);
    expect(seen).toContain(changed.version);
    // Everything else is carried over unchanged.
    expect(changed.pools[0]).toEqual(first.pools[0]);

    llamaA.body = vllmText({ waiting: 3, running: 7, kv: 0.41, lora: { max: 4, running: "sql-lora", waiting: "chat-lora" } });
    const lora = await waitFor("lora change", () => w.messages.find((s) => s.pools[0].endpoints[0].waitingAdapters.includes("chat-lora")));
    expect(lora.version).toBeGreaterThan(changed.version);
    expect(lora.pools[0].endpoints[0].runningAdapters).toEqual(["sql-lora"]);
  });

  it("marks a pod that stops answering not fresh after staleAfterMs, and fresh again when it answers", async () => {
    const { agg, config, llamaA, llamaB, qwen } = await startStack({ scrapeTimeoutMs: 150, staleAfterMs: 300 });
    // Its running count is the number of the answer, so a snapshot names the last answer it got.
    llamaB.body = (n) => vllmText({ waiting: [2, 3], running: n, kv: 0.125, lora: { max: 4, running: "", waiting: "sql-lora" } });
    const w = watch(agg.grpcPort);
    // From the first snapshot with it fresh (on a loaded machine its first scrape may time out).
    const sinceFresh = () => w.messages.slice(w.messages.findIndex((s) => endpointOf(s, 0, llamaB.port)?.fresh));
    await waitFor("llama-b fresh", () => w.messages.some((s) => endpointOf(s, 0, llamaB.port)?.fresh));

    llamaB.mode = "hang"; // scrapes time out
    const stale = await waitFor("llama-b stale", () => sinceFresh().find((s) => endpointOf(s, 0, llamaB.port)?.fresh === false));
    // Not before staleAfterMs has passed since the answer it last got. (On a loaded machine
    // that may be an answer before the hang: a scrape that lands late counts as timed out.)
    const lastAnswer = endpointOf(stale, 0, llamaB.port)!;
    expect(stale.generatedUnixMs - llamaB.answeredAt[lastAnswer.running - 1]).toBeGreaterThanOrEqual(config.aggregator.staleAfterMs);
    expect(lastAnswer.waiting).toBe(5); // last known values stay visible
    // The others stay fresh beside it. A loaded machine may stall every scrape past
    // staleAfterMs at once; the answering pods are fresh again on their next scrape.
    await waitFor("llama-b stale while the others are fresh", () =>
      w.messages.find((s) => endpointOf(s, 0, llamaB.port)?.fresh === false && endpointOf(s, 0, llamaA.port)?.fresh && s.pools[1].endpoints[0].fresh));

    // In the aggregator's metrics too: stale, and the scrapes timing out (the first stale
    // snapshot may have been a loaded machine's stall, before the first timeout).
    await waitFor("llama-b stale and timing out in the metrics", async () => {
      const text = await aggregatorMetrics(agg);
      return text.includes(`llm_gateway_endpoint_fresh{pool="llama",model_server="127.0.0.1:${llamaB.port}"} 0`) &&
        new RegExp(`llm_gateway_endpoint_scrape_errors_total\\{pool="llama",model_server="127.0.0.1:${llamaB.port}",kind="timeout"\\} [1-9]`).test(text);
    });

    llamaB.mode = "ok";
    const back = await waitFor("llama-b fresh again", () => endpointOf(last(w), 0, llamaB.port)?.fresh === true && last(w));
    expect(back.version).toBeGreaterThan(stale.version);

    qwen.mode = "error"; // HTTP 500 counts as a failed scrape too
    await waitFor("qwen stale", () => last(w).pools[1].endpoints[0].fresh === false);
  });

  it("keeps pushing to a half-closed stream and forgets cancelled ones", async () => {
    const { agg, qwen } = await startStack();
    const w1 = watch(agg.grpcPort, "envoy-1");
    const w2 = watch(agg.grpcPort, "envoy-1-duplicate");
    await waitFor("both first snapshots", () => w1.messages.length === 1 && w2.messages.length === 1);
    const streams = async () => Number(/^llm_gateway_connected_streams (\d+)$/m.exec(await aggregatorMetrics(agg))?.[1]);
    expect(await streams()).toBe(2);

    w1.call.end(); // half-close after the Hello, as proxy_grpc_close does
    w2.call.cancel(); // Envoy dropping a duplicate
    await waitFor("the cancelled stream to be forgotten", async () => (await streams()) === 1);

    qwen.body = sglangText(1, 1, 0.5);
    const pushed = await waitFor("push to the half-closed stream", () => w1.messages.find((s) => s.pools[1].endpoints[0].waiting === 1));
    expect(pushed.version).toBeGreaterThan(w1.messages[0].version);
    expect(w2.messages).toHaveLength(1);

    const text = await aggregatorMetrics(agg);
    expect(text).toContain(`llm_gateway_endpoint_waiting{pool="qwen",model_server="127.0.0.1:${qwen.port}"} 1`);
    expect(text).toContain(`llm_gateway_endpoint_lora_adapter{pool="llama",model_server=`);
    expect(Number(/^llm_gateway_snapshots_pushed_total (\d+)$/m.exec(text)?.[1])).toBeGreaterThanOrEqual(3);
  });

  it("answers its probe path cheaply and anything else with 404", async () => {
    const { agg } = await startStack();
    const health = await fetch(`http://127.0.0.1:${agg.metricsPort}/healthz`);
    expect([health.status, await health.text()]).toEqual([200, "ok\n"]);
    expect((await fetch(`http://127.0.0.1:${agg.metricsPort}/secrets`)).status).toBe(404);
  });

  it("close() ends streams and frees the port", async () => {
    const { agg } = await startStack();
    const w = watch(agg.grpcPort);
    await waitFor("first snapshot", () => last(w));
    const ended = new Promise<grpc.StatusObject>((resolve) => w.call.on("status", resolve));
    await agg.close();
    expect((await ended).code).toBe(grpc.status.OK);
    await expect(fetch(`http://127.0.0.1:${agg.metricsPort}/metrics`)).rejects.toThrow();
  });
});

describe("aggregator with fake engines of every dialect", () => {
  it("reads pre-0.9.2 vLLM, SGLang and TGI pods, and learns that a 0.35x pod is slower", async () => {
    const busy = { promptTokens: 64, maxTokens: 5000 };
    const fleet = await startFleet([
      { name: "vllm-fast", model: "m", metricsFormat: "vllm" },
      { name: "vllm-old-slow", model: "m", metricsFormat: "vllm-legacy", engineConfig: { speed: 0.35 } },
      { name: "sglang", model: "s", metricsFormat: "sglang" },
      { name: "tgi", model: "t", metricsFormat: "tgi" },
    ]);
    cleanups.push(() => fleet.close());
    for (const pod of fleet.pods) pod.injectLoad({ requests: 8, ...busy });
    const config = parseGatewayConfig(`
aggregator: { port: 0, metricsPort: 0, scrapeIntervalMs: 20, staleAfterMs: ${SLOW_MACHINE_PROOF.staleAfterMs} }
pools:
  - { name: vllm, baseModel: m, engine: vllm, endpoints: ["${fleet.pod("vllm-fast").address}", "${fleet.pod("vllm-old-slow").address}"] }
  - { name: sglang, baseModel: s, engine: sglang, endpoints: ["${fleet.pod("sglang").address}"] }
  - { name: tgi, baseModel: t, engine: tgi, endpoints: ["${fleet.pod("tgi").address}"] }
`);
    const agg = await startAggregator(config, { port: 0, metricsPort: 0, log: () => {} });
    cleanups.push(() => agg.close());

    const s = await waitFor("a capacity for every pod", () => agg.current().pools.every((p) => p.endpoints.every((e) => e.capacity! > 0)) && agg.current());
    const [fast, slow] = s.pools[0].endpoints;
    expect(slow.capacity).toBeLessThan(fast.capacity! * 0.6);
    for (const e of s.pools.flatMap((p) => p.endpoints)) expect(e).toMatchObject({ fresh: true, running: 8 });
    // KV usage read from gpu_cache_usage_perc on the old vLLM; TGI has no KV gauge.
    expect(slow.kvCacheUsage).toBeGreaterThan(0);
    expect(s.pools[1].endpoints[0].kvCacheUsage).toBeGreaterThan(0);
    expect(s.pools[2].endpoints[0].kvCacheUsage).toBe(0);

    const text = await aggregatorMetrics(agg);
    expect(text).toMatch(new RegExp(`llm_gateway_endpoint_learned_capacity\\{pool="tgi",model_server="${fleet.pod("tgi").address}"\\} [1-9]`));
  });
});

describe("aggregator with malformed gauges", () => {
  const vllm = (waiting: string, running = "1", kv = "0.5") =>
    `vllm:num_requests_waiting{engine="0"} ${waiting}\nvllm:num_requests_running{engine="0"} ${running}\nvllm:kv_cache_usage_perc{engine="0"} ${kv}\n`;

  // A scrape timeout far off: a loaded machine's slow scrape must not log a line between the malformed ones.
  async function start(good: Pod, bad: Pod) {
    const config = parseGatewayConfig(`
aggregator: { port: 0, metricsPort: 0, scrapeIntervalMs: 20, scrapeTimeoutMs: ${SLOW_MACHINE_PROOF.scrapeTimeoutMs}, staleAfterMs: 300 }
pools: [{ name: llama, baseModel: m, endpoints: ["127.0.0.1:${good.port}", "127.0.0.1:${bad.port}"] }]
`);
    const logs: string[] = [];
    const agg = await startAggregator(config, { port: 0, metricsPort: 0, log: (line) => logs.push(line) });
    cleanups.push(() => agg.close());
    return { agg, config, logs };
  }

  it("marks a pod whose queue turns NaN, then negative, stale after staleAfterMs, logging each change once", async () => {
    const good = await startPod(vllm("2"));
    // Its running count is the number of the answer, so a snapshot names the last answer it got.
    const pod = await startPod((n) => vllm("3", String(n)));
    const { agg, config, logs } = await start(good, pod);
    const w = watch(agg.grpcPort);
    // From the first snapshot with it fresh (on a loaded machine its first scrape may time out).
    const sinceFresh = () => w.messages.slice(w.messages.findIndex((s) => endpointOf(s, 0, pod.port)?.fresh));
    await waitFor("the pod fresh", () => w.messages.some((s) => endpointOf(s, 0, pod.port)?.fresh));

    pod.body = vllm("NaN"); // every later answer is malformed
    const stale = await waitFor("pod stale", () => sinceFresh().find((s) => endpointOf(s, 0, pod.port)?.fresh === false));
    // Not before staleAfterMs has passed since the valid answer it last got.
    const lastValid = endpointOf(stale, 0, pod.port)!;
    expect(stale.generatedUnixMs - pod.answeredAt[lastValid.running - 1]).toBeGreaterThanOrEqual(config.aggregator.staleAfterMs);
    // The last good values stay visible, never the NaN read as 0; the other pod is untouched
    // (fresh beside it, once its next scrape lands if a loaded machine stalled them both).
    expect(lastValid.waiting).toBe(3);
    await waitFor("the pod stale while the good one is fresh", () =>
      w.messages.find((s) => endpointOf(s, 0, pod.port)?.fresh === false && endpointOf(s, 0, good.port)?.fresh));

    const hits = pod.hits;
    await waitFor("5 more malformed scrapes", () => pod.hits >= hits + 5);
    expect(endpointOf(agg.current(), 0, pod.port)).toMatchObject({ fresh: false, waiting: 3 });
    const nanLines = logs.filter((l) => l.includes("vllm:num_requests_waiting"));
    expect(nanLines).toEqual([`endpoint 127.0.0.1:${pod.port} scrape failed: malformed vllm:num_requests_waiting: NaN (expected a finite number >= 0)`]);
    const text = await aggregatorMetrics(agg);
    expect(text).toContain(`llm_gateway_endpoint_fresh{pool="llama",model_server="127.0.0.1:${pod.port}"} 0`);
    expect(text).toMatch(new RegExp(`llm_gateway_endpoint_scrape_errors_total\\{pool="llama",model_server="127.0.0.1:${pod.port}",kind="parse"\\} ([5-9]|\\d\\d)`));

    pod.body = vllm("-1");
    await waitFor("a log line for the new value", () => logs.some((l) => l.endsWith("malformed vllm:num_requests_waiting: -1 (expected a finite number >= 0)")));
    expect(endpointOf(agg.current(), 0, pod.port)?.fresh).toBe(false);

    pod.body = vllm("4");
    const back = await waitFor("pod fresh again", () => w.messages.find((s) => endpointOf(s, 0, pod.port)?.fresh === true && endpointOf(s, 0, pod.port)?.waiting === 4));
    expect(back.version).toBeGreaterThan(stale.version);
    expect(logs).toContain(`endpoint 127.0.0.1:${pod.port} scrapes OK again`);
  });

  it("never marks fresh a pod whose running gauge is +Inf or KV gauge -Inf from the start", async () => {
    const good = await startPod(vllm("0"));
    const pod = await startPod(vllm("0", "+Inf"));
    const { agg, logs } = await start(good, pod);
    const hits = pod.hits;
    await waitFor("5 more scrapes", () => pod.hits >= hits + 5);
    expect(endpointOf(agg.current(), 0, pod.port)?.fresh).toBe(false);
    const withGood = await waitFor("the good pod fresh", () => endpointOf(agg.current(), 0, good.port)?.fresh && agg.current());
    expect(endpointOf(withGood, 0, pod.port)?.fresh).toBe(false);
    expect(logs).toContain(`endpoint 127.0.0.1:${pod.port} scrape failed: malformed vllm:num_requests_running: +Inf (expected a finite number >= 0)`);

    pod.body = vllm("0", "1", "-Inf");
    await waitFor("the KV log line", () => logs.some((l) => l.endsWith("malformed vllm:kv_cache_usage_perc: -Inf (expected a finite number >= 0)")));
    expect(endpointOf(agg.current(), 0, pod.port)?.fresh).toBe(false);
  });
});

describe("Prometheus text parser", () => {
  it("reads names, escaped labels, special values, exponents and timestamps; skips comments and junk", () => {
    const samples = parsePrometheusText(
      [
        "# HELP x_total A counter.",
        "# TYPE x_total counter",
        "  ",
        'x_total{path="/a\\"b\\\\c\\nd",code="200",} 1.5e+3 1700000000000\r',
        "up 1",
        "nan_metric NaN",
        'inf_metric{le="+Inf"} +Inf',
        "neg_inf -Inf",
        "small 4.2E-2",
        "broken{label=unquoted} 1",
        "no_value",
        'unterminated{a="x} 1',
        "name_with:colons 7",
      ].join("\n"),
    );
    expect(samples.map((s) => s.name)).toEqual(["x_total", "up", "nan_metric", "inf_metric", "neg_inf", "small", "name_with:colons"]);
    expect(samples[0]).toEqual({ name: "x_total", labels: { path: '/a"b\\c\nd', code: "200" }, value: 1500 });
    expect(samples[2].value).toBeNaN();
    expect(samples[3]).toEqual({ name: "inf_metric", labels: { le: "+Inf" }, value: Infinity });
    expect(samples[4].value).toBe(-Infinity);
    expect(samples[5].value).toBe(0.042);
  });

  it("skips label parsing for unwanted names", () => {
    const samples = parsePrometheusText('a{x="1"} 1\nb{y="2"} 2\n', (n) => n === "b");
    expect(samples).toEqual([{ name: "b", labels: { y: "2" }, value: 2 }]);
  });
});

describe("normalise", () => {
  it("vLLM: sums counts over engines, takes the max KV, falls back to gpu_cache_usage_perc", () => {
    const m = normalise(
      "vllm",
      parsePrometheusText(
        [
          'vllm:num_requests_waiting{engine="0"} 2',
          'vllm:num_requests_waiting{engine="1"} 3',
          'vllm:num_requests_running{engine="0"} 4',
          'vllm:num_requests_running{engine="1"} 1',
          'vllm:gpu_cache_usage_perc{engine="0"} 0.2',
          'vllm:gpu_cache_usage_perc{engine="1"} 0.7',
        ].join("\n"),
      ),
    );
    expect(m).toEqual({ waiting: 5, running: 5, kvCacheUsage: 0.7, maxLora: 0, runningAdapters: [], waitingAdapters: [], itl: null, kvTokens: 0, asleep: false });
  });

  it("vLLM: takes LoRA info from the newest series", () => {
    const m = normalise(
      "vllm",
      parsePrometheusText(
        [
          "vllm:num_requests_waiting 0",
          "vllm:num_requests_running 0",
          'vllm:lora_requests_info{max_lora="8",running_lora_adapters="b, a,a",waiting_lora_adapters="c"} 1.7382173358407154e+09',
          'vllm:lora_requests_info{max_lora="1",running_lora_adapters="z",waiting_lora_adapters=""} 1.6e+09',
        ].join("\n"),
      ),
    );
    expect(m).toMatchObject({ maxLora: 8, runningAdapters: ["a", "b"], waitingAdapters: ["c"], kvCacheUsage: 0 });
  });

  it("SGLang and TGI map their own names; TGI has no KV gauge", () => {
    expect(normalise("sglang", parsePrometheusText(sglangText(3, 4, 0.5)))).toMatchObject({ waiting: 3, running: 4, kvCacheUsage: 0.5 });
    expect(normalise("tgi", parsePrometheusText(tgiText(2, 8)))).toMatchObject({ waiting: 2, running: 8, kvCacheUsage: 0 });
  });

  it("llama.cpp: busy slots run, deferred tasks wait, and an older build's KV ratio is read", () => {
    const current = ["llamacpp:requests_processing 2", "llamacpp:requests_deferred 3", "llamacpp:n_busy_slots_per_decode 2"];
    expect(normalise("llamacpp", parsePrometheusText(current.join("\n")))).toMatchObject({ waiting: 3, running: 2, kvCacheUsage: 0 });
    expect(normalise("llamacpp", parsePrometheusText([...current, "llamacpp:kv_cache_usage_ratio 0.25"].join("\n")))).toMatchObject({ kvCacheUsage: 0.25 });
  });

  it("rejects a scrape without the engine's queue/running gauges", () => {
    expect(() => normalise("sglang", parsePrometheusText(tgiText(1, 1)))).toThrow(/sglang:num_queue_reqs/);
  });

  it.each([
    ["NaN", "NaN"],
    ["-1", "-1"],
    ["+Inf", "+Inf"],
    ["-Inf", "-Inf"],
  ])("rejects a scrape with a gauge of %s instead of reading it as 0", (text, shown) => {
    const expected = (name: string) => `malformed ${name}: ${shown} (expected a finite number >= 0)`;
    const vllm = (waiting: string, running: string, kv: string) =>
      parsePrometheusText(
        `vllm:num_requests_waiting{engine="0"} 1\nvllm:num_requests_waiting{engine="1"} ${waiting}\n` +
          `vllm:num_requests_running ${running}\nvllm:kv_cache_usage_perc ${kv}\nvllm:gpu_cache_usage_perc 0.5\n`,
      );
    // One bad series of a data-parallel pod is enough.
    expect(() => normalise("vllm", vllm(text, "1", "0.5"))).toThrow(expected("vllm:num_requests_waiting"));
    expect(() => normalise("vllm", vllm("1", text, "0.5"))).toThrow(expected("vllm:num_requests_running"));
    // A malformed preferred KV gauge is not replaced by the older name.
    expect(() => normalise("vllm", vllm("1", "1", text))).toThrow(expected("vllm:kv_cache_usage_perc"));
    expect(() => normalise("sglang", parsePrometheusText(`sglang:num_queue_reqs 1\nsglang:num_running_reqs 1\nsglang:token_usage ${text}\n`))).toThrow(
      expected("sglang:token_usage"),
    );
    expect(() => normalise("tgi", parsePrometheusText(`tgi_queue_size ${text}\ntgi_batch_current_size 1\n`))).toThrow(expected("tgi_queue_size"));
  });

  it("still accepts zeros, and KV usage above 1 is capped", () => {
    expect(normalise("sglang", parsePrometheusText(sglangText(0, 0, 1.2)))).toMatchObject({ waiting: 0, running: 0, kvCacheUsage: 1 });
  });
});
