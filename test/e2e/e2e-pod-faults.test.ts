// Pods that fail in ways a health check cannot see, through a real Envoy with
// two workers and the official OpenAI client: a pod that accepts requests and
// never answers (hot-added to a live pool under load), a pod that answers 200
// and then breaks its streams, and pods whose scrapes fail while the
// aggregator is gone (the filter routes blind).
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { afterEach, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { loadGatewayConfig, resolveConfigHosts } from "../../host/config.js";
import { startFleet, type Fleet } from "../../testing/fakeserver/index.js";
import { startStack, type Stack } from "../../testing/launcher/stack.js";
import { startScriptedPod, type ScriptedPod } from "../helpers/scripted-pod.js";
import { waitForWorkers } from "../helpers/connections.js";
import { waitFor } from "../helpers/stack.js";

const MODEL = "llama-3.1-8b";
/** Short deadlines, so a hang is seen in a second, not in the built-in 20 s. */
const DEADLINES = { firstByteMs: 1_000, promptMsPerKToken: 1, outputMsPerToken: 10, assumedOutputTokens: 16, streamIdleMs: 1_000 };
const EJECT_MS = 4_000;

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A gateway from a config file (so pods can be hot-added), with the test's deadlines and ejection time; two workers unless told. */
async function gateway(endpoints: string[], extra: Record<string, unknown> = {}, concurrency = 2): Promise<{ stack: Stack; setEndpoints: (e: string[]) => void }> {
  const dir = mkdtempSync(join(tmpdir(), "llm-gw-faults-"));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, "gateway.yaml");
  const doc = (e: string[]) => ({
    gateway: { host: "127.0.0.1", port: 0, adminPort: 0, passiveHealth: { ejectAfterFailures: 3, ejectMs: EJECT_MS }, ...extra },
    aggregator: { host: "127.0.0.1", port: 0, metricsPort: 0, scrapeIntervalMs: 50, staleAfterMs: 500 },
    profiles: { latency: { deadlines: DEADLINES } },
    pools: [{ name: "p", baseModel: MODEL, endpoints: e }],
  });
  writeFileSync(path, stringify(doc(endpoints)));
  const stack = await startStack(await resolveConfigHosts(loadGatewayConfig(path), path), {
    configPath: path, configPollMs: 200, metricsPort: false, concurrency,
  });
  cleanups.push(() => stack.close());
  return { stack, setEndpoints: (e) => writeFileSync(path, stringify(doc(e))) };
}

interface Sent {
  sentAt: number;
  status: number;
  pod: string;
}

/** One non-streamed chat completion; an error is a status (0: no answer at all). */
async function ask(client: OpenAI): Promise<Sent> {
  const sentAt = Date.now();
  try {
    const { response } = await client.chat.completions
      .create({ model: MODEL, messages: [{ role: "user", content: `hello ${sentAt} ${Math.random()}` }], max_tokens: 1 })
      .withResponse();
    return { sentAt, status: response.status, pod: response.headers.get("x-served-by") ?? "" };
  } catch (err) {
    return { sentAt, status: (err as { status?: number }).status ?? 0, pod: "" };
  }
}

/** Open loop: `perS` requests a second for `ms`, each recorded when it ends. */
async function load(client: OpenAI, perS: number, ms: number): Promise<Sent[]> {
  const pending: Array<Promise<Sent>> = [];
  const end = Date.now() + ms;
  while (Date.now() < end) {
    pending.push(ask(client));
    await new Promise((r) => setTimeout(r, 1000 / perS));
  }
  return Promise.all(pending);
}

const client = (stack: Stack) => new OpenAI({ baseURL: `${stack.gatewayUrl}/v1`, apiKey: "x", maxRetries: 0, timeout: 30_000 });

async function filterEjected(stack: Stack): Promise<number> {
  const gauge = encodeURIComponent("^wasmcustom\\.llm_gateway\\.pool_pods_ejected;pool=p$");
  const stats = (await (await fetch(`${stack.envoy.adminUrl}/stats?format=json&type=Gauges&filter=${gauge}`)).json()) as { stats: Array<{ value?: number }> };
  return Number(stats.stats[0]?.value ?? 0);
}

describe("a pod that accepts requests and never answers", () => {
  it("is hot-added under 20 req/s: after its first deadline nothing waits on it, every request gets 200, and it is taken back once it answers", async () => {
    const a = await startScriptedPod("a", MODEL);
    const b = await startScriptedPod("b", MODEL);
    const hung = await startScriptedPod("hung", MODEL);
    cleanups.push(() => a.close(), () => b.close(), () => hung.close());
    hung.hang = true;
    const { stack, setEndpoints } = await gateway([a.address, b.address]);
    const openai = client(stack);
    await waitFor("the pool to answer", async () => (await ask(openai)).status === 200);

    const traffic = load(openai, 20, 9_000);
    await new Promise((r) => setTimeout(r, 1_000));
    setEndpoints([a.address, b.address, hung.address]);
    const sent = await traffic;

    // Every request the client sent was answered, by a pod that answers.
    expect(sent.filter((s) => s.status !== 200)).toEqual([]);
    expect(new Set(sent.map((s) => s.pod))).toEqual(new Set(["a", "b"]));
    // The hung pod was tried (it was added and looked idle) ...
    expect(hung.arrivals.length).toBeGreaterThan(0);
    // ... and once its first deadline had fired (and the ledger shared the
    // failures), no request went to it until its ejection ran out.
    const fired = hung.arrivals[0] + DEADLINES.firstByteMs;
    const late = hung.arrivals.filter((t) => t > fired + 500 && t < fired + EJECT_MS - 500);
    expect(late.map((t) => t - hung.arrivals[0]), JSON.stringify(hung.arrivals.map((t) => t - hung.arrivals[0]))).toEqual([]);
    // A hung request stays counted: only a few were ever sent there.
    expect(hung.arrivals.length).toBeLessThan(10);

    // It answers again: after the ejection it is tried and kept.
    hung.hang = false;
    await waitFor("the recovered pod to serve again", async () => (await ask(openai)).pod === "hung", 20_000);
  }, 60_000);
});

describe("a pod that answers 200 and then breaks every stream", () => {
  let fleet: Fleet;

  it("is ejected: streams stop going to it", async () => {
    fleet = await startFleet(["good-1", "good-2", "breaker"].map((name) => ({ name, model: MODEL })));
    cleanups.push(() => fleet.close());
    fleet.pod("breaker").setFault("break-streams");
    const { stack } = await gateway(fleet.pods.map((p) => p.address));
    const openai = client(stack);
    const stream = async (): Promise<{ pod: string; complete: boolean }> => {
      const { data, response } = await openai.chat.completions
        .create({ model: MODEL, messages: [{ role: "user", content: `stream ${Math.random()}` }], max_tokens: 8, stream: true })
        .withResponse();
      let complete = false;
      try {
        for await (const chunk of data) if (chunk.choices[0]?.finish_reason) complete = true;
      } catch {
        complete = false;
      }
      return { pod: response.headers.get("x-served-by") ?? "", complete };
    };
    const before: Array<{ pod: string; complete: boolean }> = [];
    await waitFor("the filter to eject the stream breaker", async () => {
      before.push(...(await Promise.all([stream(), stream(), stream()])));
      return (await filterEjected(stack)) === 1;
    }, 20_000);
    // Only the breaker broke streams, and it did break them.
    expect(before.filter((s) => !s.complete).every((s) => s.pod === "breaker")).toBe(true);
    expect(before.some((s) => s.pod === "breaker" && !s.complete)).toBe(true);
    // Ejected: every stream now completes elsewhere.
    const after = await Promise.all(Array.from({ length: 12 }, () => stream()));
    expect(after.every((s) => s.complete && s.pod !== "breaker")).toBe(true);
  }, 60_000);
});

describe("while the view is stale", () => {
  let pods: ScriptedPod[];

  it("sends nothing to pods whose scrapes were failing when the aggregator was last heard", async () => {
    pods = await Promise.all(["ok-1", "ok-2", "bad-1", "bad-2"].map((n) => startScriptedPod(n, MODEL)));
    cleanups.push(...pods.map((p) => () => p.close()));
    const { stack } = await gateway(pods.map((p) => p.address), { staleView: { maxAgeMs: 1_500 } });
    const openai = client(stack);
    await waitFor("the pool to answer", async () => (await ask(openai)).status === 200);
    for (const p of pods.filter((p) => p.name.startsWith("bad"))) p.metricsOk = false;
    // The aggregator sees their scrapes fail (stale after 500 ms) and marks them so, then goes away.
    await waitFor("the aggregator to mark the failing pods", () => {
      const endpoints = stack.aggregator.current().pools[0].endpoints;
      return endpoints.filter((e) => !e.fresh).length === 2;
    });
    await new Promise((r) => setTimeout(r, 300));
    await stack.aggregator.close();
    await waitFor("the view to go stale", async () => {
      const health = (await (await fetch(`${stack.gatewayUrl}/health`)).json()) as { status: string };
      return health.status === "degraded";
    });
    const arrivals = () => pods.map((p) => p.arrivals.length);
    const start = arrivals();
    const sent = await Promise.all(Array.from({ length: 40 }, () => ask(openai)));
    expect(sent.filter((s) => s.status !== 200)).toEqual([]);
    const got = arrivals().map((n, i) => n - start[i]);
    expect(got[2] + got[3]).toBe(0);
    expect(got[0]).toBeGreaterThan(0);
    expect(got[1]).toBeGreaterThan(0);
  }, 60_000);
});

describe("a pod that stalls its streams after the first event", () => {
  it("has each stall cut after streamIdleMs: the client's stream ends, and the pod is counted failing", async () => {
    // The staller alone in its pool, so every stream meets the stall whatever the picker prefers.
    const fleet = await startFleet([{ name: "staller", model: MODEL }]);
    cleanups.push(() => fleet.close());
    fleet.pod("staller").setFault("stall-stream");
    const { stack } = await gateway(fleet.pods.map((p) => p.address));
    const openai = client(stack);
    const ends: Array<{ pod: string; ms: number; complete: boolean }> = [];
    for (let i = 0; i < 4; i++) {
      const { data, response } = await openai.chat.completions
        .create({ model: MODEL, messages: [{ role: "user", content: `stall ${i} ${Math.random()}` }], max_tokens: 8, stream: true })
        .withResponse();
      const t0 = Date.now();
      let complete = false;
      try {
        for await (const chunk of data) if (chunk.choices[0]?.finish_reason) complete = true;
      } catch {
        complete = false;
      }
      ends.push({ pod: response.headers.get("x-served-by") ?? "", ms: Date.now() - t0, complete });
    }
    // Every stream met the stall and was cut after the idle bound (and Envoy's 1 s delayed close), never left hanging.
    for (const e of ends) {
      expect(e, JSON.stringify(ends)).toMatchObject({ pod: "staller", complete: false });
      expect(e.ms).toBeLessThan(DEADLINES.streamIdleMs + 5_000);
    }
    // Each cut counted against the pod: past ejectAfterFailures it is ejected (the pool still
    // fails open to it, having no other).
    await waitFor("the filter to eject the staller", async () => (await filterEjected(stack)) === 1);
  }, 90_000);
});

describe("a vLLM pod put to sleep (sleep mode)", () => {
  it("gets no request while vllm:engine_sleep_state says it sleeps, and serves again once woken", async () => {
    const fleet = await startFleet([{ name: "a", model: MODEL }, { name: "b", model: MODEL }]);
    cleanups.push(() => fleet.close());
    const { stack } = await gateway(fleet.pods.map((p) => p.address));
    const openai = client(stack);
    const sleeper = fleet.pod("b");
    const post = async (path: string) => expect((await fetch(`${sleeper.url}${path}`, { method: "POST" })).status).toBe(200);
    await post("/sleep");
    await waitFor("the aggregator to leave the sleeping pod out", () =>
      stack.aggregator.current().pools[0].endpoints.some((e) => e.address === sleeper.address && !e.fresh));
    await waitForWorkers(stack);
    const asleep = await Promise.all(Array.from({ length: 12 }, () => ask(openai)));
    expect(asleep.map((s) => [s.status, s.pod])).toEqual(Array(12).fill([200, "a"]));
    await post("/wake_up");
    await waitFor("the woken pod to serve again", async () => (await Promise.all(Array.from({ length: 6 }, () => ask(openai)))).some((s) => s.pod === "b"));
  }, 60_000);
});

describe("a pod whose 200 streams end in an error event", () => {
  it("is counted failing for each (llm_gateway_stream_errors_total), and the client sees the error", async () => {
    const fleet = await startFleet([{ name: "erring", model: MODEL }]);
    cleanups.push(() => fleet.close());
    fleet.pod("erring").setFault("stream-error");
    const { stack } = await gateway(fleet.pods.map((p) => p.address));
    const openai = client(stack);
    for (let i = 0; i < 4; i++) {
      const stream = await openai.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: `err ${i} ${Math.random()}` }], max_tokens: 8, stream: true });
      const err = await (async () => {
        for await (const _ of stream) void _;
      })().then(() => null, (e: unknown) => e);
      expect(err).toBeInstanceOf(OpenAI.APIError);
    }
    const errors = async () => {
      const text = await (await fetch(`${stack.envoy.adminUrl}/stats?filter=stream_errors_total`)).text();
      return [...text.matchAll(/stream_errors_total[^:]*: (\d+)/g)].reduce((n, m) => n + Number(m[1]), 0);
    };
    await waitFor("four stream errors counted", async () => (await errors()) === 4);
    // Past ejectAfterFailures the pod is ejected (its pool, having no other, still fails open to it).
    await waitFor("the filter to eject the erring pod", async () => (await filterEjected(stack)) === 1);
  }, 90_000);
});

describe("a pod that answers 429 (it is full)", () => {
  it("is backed off, not ejected: its 429 reaches the client, the next requests go elsewhere, no failure is counted", async () => {
    const fleet = await startFleet([{ name: "full", model: MODEL }, { name: "ok", model: MODEL }]);
    cleanups.push(() => fleet.close());
    fleet.pod("full").setFault("overloaded");
    // A long back-off, so "passed over" does not depend on how fast this machine sends the next requests;
    // one worker, which records the back-off before it routes the next request (another worker would
    // read it from shared data on its next refresh tick, and could route one request in between).
    const { stack } = await gateway(fleet.pods.map((p) => p.address), { passiveHealth: { ejectAfterFailures: 1, ejectMs: EJECT_MS, saturatedBackoffMs: 60_000 } }, 1);
    const openai = client(stack);
    const seen: Sent[] = [];
    for (let i = 0; i < 20 && !seen.some((s) => s.status === 429); i++) seen.push(await ask(openai));
    expect(seen.map((s) => s.status)).toContain(429);
    const after = await Promise.all(Array.from({ length: 6 }, () => ask(openai)));
    expect(after.map((s) => [s.status, s.pod])).toEqual(Array.from({ length: 6 }, () => [200, "ok"]));
    const counter = async (name: string) => {
      const text = await (await fetch(`${stack.envoy.adminUrl}/stats?filter=${name}`)).text();
      return [...text.matchAll(new RegExp(`${name}[^:]*: (\\d+)`, "g"))].reduce((n, m) => n + Number(m[1]), 0);
    };
    await waitFor("the back-off counted", async () => (await counter("endpoint_saturated_total")) >= 1);
    expect(await counter("endpoint_failures_total")).toBe(0);
  }, 60_000);
});
