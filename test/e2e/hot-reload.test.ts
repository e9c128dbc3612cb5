// Hot reload through a real Envoy: the gateway runs from a config file with
// traffic going through it all along (the official OpenAI client, several
// loops at once, plain and streamed), and the file is edited: a pool is
// added, weights, adapters, an admission limit, a model's rate limit,
// deadlines and batch slots change, a pool is removed, and invalid edits are made. Envoy is never
// restarted, no request for a model that exists throughout fails, and each
// change reaches both of Envoy's workers.
import { mkdtempSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { loadGatewayConfig } from "../../host/config.js";
import { startFleet, type Fleet } from "../../testing/fakeserver/index.js";
import { startStack, type Stack } from "../../testing/launcher/stack.js";
import { connect, type Conn } from "../helpers/connections.js";
import { waitFor } from "../helpers/stack.js";

let fleet: Fleet;
let stack: Stack;
let dir: string;
let configPath: string;
const logs: string[] = [];
let workers: Conn[] = [];

/** The config file's document, as the test last wrote it. */
let doc: Record<string, any>;

function write(next: Record<string, any>, how: "rename" | "in place"): void {
  doc = next;
  const text = stringify(next);
  if (how === "in place") {
    writeFileSync(configPath, text);
    return;
  }
  // As most editors save: a new file renamed over the old one.
  const tmp = `${configPath}.tmp`;
  writeFileSync(tmp, text);
  renameSync(tmp, configPath);
}

/** Writes an edit of the file and waits for the reload's outcome. */
async function edit(change: (d: Record<string, any>) => void, expected: "applied" | "refused", how: "rename" | "in place" = "rename"): Promise<string> {
  const next = structuredClone(doc);
  change(next);
  const before = await reloads();
  const seen = logs.length;
  write(next, how);
  let after = before;
  await waitFor(`the edit to be ${expected}`, async () => {
    after = await reloads();
    return after.applied + after.refused > before.applied + before.refused;
  });
  expect(after[expected]).toBe(before[expected] + 1);
  return logs.slice(seen).find((l) => l.includes(`config reload ${expected}`)) ?? "";
}

/** The aggregator's count of reloads, from its /metrics. */
async function reloads(): Promise<{ applied: number; refused: number }> {
  const text = await (await fetch(`http://127.0.0.1:${stack.aggregator.metricsPort}/metrics`)).text();
  const count = (outcome: string) => Number(new RegExp(`^llm_gateway_config_reloads_total\\{outcome="${outcome}"\\} (\\d+)$`, "m").exec(text)?.[1]);
  return { applied: count("applied"), refused: count("refused") };
}

/** Both workers route on the aggregator's current snapshot (or a newer one). */
async function installed(): Promise<void> {
  const version = Number(stack.aggregator.current().version);
  await waitFor(`both workers to install snapshot ${version}`, async () => {
    for (const c of workers) if ((await c.get("/health")).json.snapshot_version < version) return false;
    return true;
  });
}

async function serverInfo(): Promise<{ uptime: number; state: string }> {
  const info = (await (await fetch(`${stack.envoy.adminUrl}/server_info`)).json()) as { uptime_current_epoch: string; state: string };
  return { uptime: Number.parseFloat(info.uptime_current_epoch), state: info.state };
}

async function poolClusters(): Promise<string[]> {
  const body = (await (await fetch(`${stack.envoy.adminUrl}/clusters?format=json`)).json()) as { cluster_statuses: Array<{ name: string }> };
  return body.cluster_statuses.map((c) => c.name).filter((n) => n.startsWith("llm_gateway_pool_")).sort();
}

const ask = { messages: [{ role: "user" as const, content: "Say hello" }], max_tokens: 4 };

// ---------------------------------------------------------------------------
// Traffic: loops of requests for models that exist throughout, bounded.

const STEADY_MODELS = ["llama-3.1-8b", "sql-lora"];
const LOOPS = 4;
const MAX_REQUESTS_PER_LOOP = 5_000;
const traffic = { stop: false, ok: 0, failures: [] as string[], loops: [] as Promise<void>[] };

async function loop(k: number): Promise<void> {
  const client = new OpenAI({ baseURL: `${stack.gatewayUrl}/v1`, apiKey: "x", maxRetries: 0 });
  for (let i = 0; i < MAX_REQUESTS_PER_LOOP && !traffic.stop; i++) {
    const model = STEADY_MODELS[(i + k) % STEADY_MODELS.length];
    try {
      if (k % 2 === 0) {
        const r = await client.chat.completions.create({ model, ...ask });
        if (r.choices[0].message.content === null) throw new Error("empty answer");
      } else {
        let chunks = 0;
        for await (const _ of await client.chat.completions.create({ model, ...ask, stream: true })) chunks++;
        if (chunks < ask.max_tokens) throw new Error(`stream ended after ${chunks} chunks`);
      }
      traffic.ok++;
    } catch (err) {
      traffic.failures.push(`${model}: ${(err as Error).message}`);
    }
  }
}

beforeAll(async () => {
  fleet = await startFleet([
    { name: "llama-a", model: "llama-3.1-8b", adapters: ["sql-lora", "chat-lora"] },
    { name: "llama-b", model: "llama-3.1-8b", adapters: ["sql-lora", "chat-lora"] },
    { name: "qwen-a", model: "qwen3-32b" },
    { name: "mistral-a", model: "mistral-7b" },
  ]);
  dir = mkdtempSync(join(tmpdir(), "hot-reload-test-"));
  configPath = join(dir, "gateway.yaml");
  write(
    {
      apiVersion: "llm-gateway/v1",
      kind: "InferenceGatewayConfig",
      gateway: { host: "127.0.0.1", port: 0, adminPort: 0 },
      aggregator: { host: "127.0.0.1", port: 0, metricsPort: 0, scrapeIntervalMs: 50, staleAfterMs: 1000 },
      // Four loops on two pods that load adapters on demand queue now and
      // then: admission must not refuse them (this tests reloads, not admission).
      profiles: { latency: { admission: { maxWaiting: 50 } } },
      pools: [
        { name: "llama", baseModel: "llama-3.1-8b", adapters: ["sql-lora"], endpoints: [fleet.pod("llama-a").address, fleet.pod("llama-b").address] },
        { name: "qwen", baseModel: "qwen3-32b", endpoints: [fleet.pod("qwen-a").address] },
      ],
    },
    "in place",
  );
  stack = await startStack(loadGatewayConfig(configPath), {
    configPath,
    configPollMs: 500,
    concurrency: 2,
    log: (line) => logs.push(`${new Date().toISOString()} ${line}`),
    metricsPort: 0,
  });
  workers = await connect(stack, 1);
  traffic.loops = Array.from({ length: LOOPS }, (_, k) => loop(k));
}, 60_000);

afterAll(async () => {
  traffic.stop = true;
  await Promise.all(traffic.loops);
  for (const c of workers) c.agent.destroy();
  await stack?.close();
  await fleet?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe("editing the config file of a running gateway", () => {
  let pid: number;
  let uptimeAtStart: number;

  it("starts with the file's pools, served to Envoy over ADS", async () => {
    pid = stack.envoy.pid;
    uptimeAtStart = (await serverInfo()).uptime;
    expect(await poolClusters()).toEqual(["llm_gateway_pool_llama", "llm_gateway_pool_qwen"]);
    await waitFor("traffic to flow", () => traffic.ok >= 20);
  });

  it("adds a pool: its model is servable on every worker once the reload is applied and installed", async () => {
    const line = await edit((d) => {
      d.pools.push({ name: "mistral", baseModel: "mistral-7b", endpoints: [fleet.pod("mistral-a").address] });
    }, "applied");
    expect(line).toContain("pool mistral added");
    expect(await poolClusters()).toEqual(["llm_gateway_pool_llama", "llm_gateway_pool_mistral", "llm_gateway_pool_qwen"]);
    await installed();
    for (const c of workers) {
      const { data, response } = await c.client.chat.completions.create({ model: "mistral-7b", ...ask }).withResponse();
      expect(data.model).toBe("mistral-7b");
      expect(response.headers.get("x-served-by")).toBe("mistral-a");
    }
    const models = await workers[0].client.models.list();
    expect(models.data.map((m) => m.id)).toContain("mistral-7b");
  });

  it("changes a pool's weights: the snapshot every worker routes on carries them", async () => {
    const line = await edit((d) => {
      d.pools[0].weights = { queue: 3, prefix: 0 };
    }, "applied", "in place");
    expect(line).toContain("pool llama: weights");
    const llama = stack.aggregator.current().pools.find((p) => p.name === "llama")!;
    expect(llama.weights).toMatchObject({ queue: 3, prefix: 0, kvCache: 1 });
    await installed();
  });

  it("adds an adapter to a pool: it becomes a servable model", async () => {
    const before = await workers[0].client.chat.completions.create({ model: "chat-lora", ...ask }).catch((e: OpenAI.APIError) => e);
    expect((before as OpenAI.APIError).status).toBe(404);
    await edit((d) => {
      d.pools[0].adapters = ["sql-lora", "chat-lora"];
    }, "applied");
    await installed();
    for (const c of workers) expect((await c.client.chat.completions.create({ model: "chat-lora", ...ask })).model).toBe("chat-lora");
  });

  it("takes a pod out of a pool: Envoy's cluster and the snapshot both follow", async () => {
    const line = await edit((d) => {
      d.pools[0].endpoints = [fleet.pod("llama-b").address];
    }, "applied");
    expect(line).toContain("pool llama: endpoints");
    const hosts = async () => {
      const body = (await (await fetch(`${stack.envoy.adminUrl}/clusters?format=json`)).json()) as { cluster_statuses: Array<{ name: string; host_statuses?: Array<{ address: { socket_address: { port_value: number } } }> }> };
      return body.cluster_statuses.find((c) => c.name === "llm_gateway_pool_llama")!.host_statuses!.map((h) => h.address.socket_address.port_value);
    };
    expect(await hosts()).toEqual([fleet.pod("llama-b").port]);
    expect(stack.aggregator.current().pools.find((p) => p.name === "llama")!.endpoints.map((e) => e.address)).toEqual([fleet.pod("llama-b").address]);
    await installed();
    for (const c of workers) {
      const { response } = await c.client.chat.completions.create({ model: "llama-3.1-8b", ...ask }).withResponse();
      expect(response.headers.get("x-served-by")).toBe("llama-b");
    }
  });

  it("changes an admission limit (snapshot) and gives a model a rate limit (Envoy's route table)", async () => {
    const line = await edit((d) => {
      d.profiles.latency.admission.maxWaiting = 60;
      d.models = [{ name: "mistral-7b", route: { rateLimit: { requestsPerS: 1 } } }];
    }, "applied");
    expect(line).toContain("profiles.latency");
    expect(line).toContain("models");
    expect(stack.aggregator.current().profiles?.find((p) => p.name === "latency")?.admission.maxWaiting).toBe(60);
    await installed();
    // A bucket of one token refilled once a second: requests sent one after
    // the other meet an empty one soon (how soon depends on the machine's speed).
    const answers: Array<number | undefined> = [];
    while (answers.length < 30 && !answers.includes(429)) {
      answers.push(await workers[0].client.chat.completions.create({ model: "mistral-7b", ...ask }).then(() => 200, (e: OpenAI.APIError) => e.status));
    }
    expect(answers).toContain(429);
    expect(answers.every((s) => s === 200 || s === 429)).toBe(true);
    const limited = await stack.envoy.stats("llm_gateway_model_mistral-7b\\.http_local_rate_limit\\.rate_limited");
    expect(Object.values(limited)[0]).toBeGreaterThanOrEqual(1);
  });

  it("changes deadlines (the snapshot, Envoy's stream routes) and a pool's batch slots (the snapshot), keeping the pool's pods", async () => {
    const llama = () => stack.aggregator.current().pools.find((p) => p.name === "llama")!.endpoints;
    // What its pod learned is lost if the pool is started afresh.
    await waitFor("llama's pod to have a learned capacity", () => (llama()[0].capacity ?? 0) > 0);
    expect(llama().map((e) => e.batchSlots)).toEqual([256]);
    const line = await edit((d) => {
      d.profiles.latency.deadlines = { firstByteMs: 9000, streamIdleMs: 45_000 };
      d.pools[0].batchSlots = 64;
    }, "applied");
    expect(line).toContain("pool llama: batchSlots");
    expect(line).toContain("profiles.latency");
    expect(llama().map((e) => e.batchSlots)).toEqual([64]);
    expect(llama()[0].capacity).toBeGreaterThan(0);
    const latency = stack.aggregator.current().profiles!.filter((p) => p.name.startsWith("latency"));
    expect(latency.map((p) => p.deadlines?.firstByteMs)).toEqual(latency.map(() => 9000));
    const dump = (await (await fetch(`${stack.envoy.adminUrl}/config_dump?resource=dynamic_route_configs`)).json()) as { configs: any[] };
    const llamaStream = dump.configs[0].route_config.virtual_hosts[0].routes.find((r: any) =>
      r.route?.cluster === "llm_gateway_pool_llama" && r.match.headers.some((h: any) => h.name === "x-gateway-stream"));
    expect(llamaStream.route.retry_policy.per_try_idle_timeout).toBe("45s");
    await installed();
  });

  it("refuses an invalid edit, naming the field, and keeps everything as it was", async () => {
    const config = stack.aggregator.config();
    // What the config decides in the snapshot (its version moves with the pods' metrics).
    const decided = () => {
      const { models, profiles, pools } = stack.aggregator.current();
      return { models, profiles, pools: pools.map((p) => ({ name: p.name, baseModel: p.baseModel, weights: p.weights })) };
    };
    const before = decided();

    const negative = await edit((d) => {
      d.pools[0].weights.queue = -1;
    }, "refused");
    expect(negative).toContain("pools[0].weights.queue: expected a number >= 0");

    const unknownKey = await edit((d) => {
      d.pools[0].weights.queue = 3;
      d.pools[1].weigths = { queue: 1 };
    }, "refused");
    expect(unknownKey).toContain('pools[1]: unknown field "weigths"');

    const fixed = await edit((d) => {
      delete d.pools[1].weigths;
      d.gateway.maxBodyBytes = 1024;
      d.aggregator.heartbeatMs = 500;
    }, "refused");
    expect(fixed).toContain("gateway.maxBodyBytes: is part of Envoy's bootstrap");
    expect(fixed).toContain("aggregator.heartbeatMs: is read once when the aggregator starts");

    expect(stack.aggregator.config()).toBe(config);
    expect(decided()).toEqual(before);
    expect(await poolClusters()).toEqual(["llm_gateway_pool_llama", "llm_gateway_pool_mistral", "llm_gateway_pool_qwen"]);
  });

  it("removes a pool: its model answers model_not_found, a request already on its way finishes, then its cluster goes", async () => {
    // A stream under way on the pool: its pod is slowed (a step every
    // ~200 ms) until the pool's cluster is gone, so it cannot finish before.
    const qwen = fleet.pod("qwen-a");
    qwen.engine.config.speed = 0.05;
    let chunks = 0;
    const streamed = (async () => {
      // Its own connection: the pinned ones below must stay free.
      const client = new OpenAI({ baseURL: `${stack.gatewayUrl}/v1`, apiKey: "x", maxRetries: 0 });
      for await (const _ of await client.chat.completions.create({ model: "qwen3-32b", ...ask, max_tokens: 100, stream: true })) chunks++;
      return chunks;
    })();
    await waitFor("the stream to start", () => chunks > 0);
    const line = await edit((d) => {
      delete d.gateway.maxBodyBytes;
      delete d.aggregator.heartbeatMs;
      d.pools = d.pools.filter((p: { name: string }) => p.name !== "qwen");
    }, "applied");
    expect(line).toContain("pool qwen removed");
    await installed();
    for (const c of workers) {
      const gone = await c.client.chat.completions.create({ model: "qwen3-32b", ...ask }).catch((e: OpenAI.APIError) => e);
      expect(gone).toBeInstanceOf(OpenAI.APIError);
      expect((gone as OpenAI.APIError).status).toBe(404);
      expect((gone as OpenAI.APIError).code).toBe("model_not_found");
    }
    await waitFor("qwen's cluster to be removed", async () => !(await poolClusters()).includes("llm_gateway_pool_qwen"), 20_000);
    expect(await poolClusters()).toEqual(["llm_gateway_pool_llama", "llm_gateway_pool_mistral"]);
    expect(chunks).toBeLessThan(100);
    qwen.engine.config.speed = 1;
    expect(await streamed).toBeGreaterThanOrEqual(100);
  }, 30_000);

  it("takes a removed pool back", async () => {
    await edit((d) => {
      d.pools.push({ name: "qwen", baseModel: "qwen3-32b", endpoints: [fleet.pod("qwen-a").address] });
    }, "applied");
    await installed();
    for (const c of workers) expect((await c.client.chat.completions.create({ model: "qwen3-32b", ...ask })).model).toBe("qwen3-32b");
  });

  it("never restarted Envoy nor failed a request for a model that exists throughout", async () => {
    traffic.stop = true;
    await Promise.all(traffic.loops);
    expect(traffic.failures).toEqual([]);
    expect(traffic.ok).toBeGreaterThan(100);
    expect(stack.envoy.pid).toBe(pid);
    const info = await serverInfo();
    expect(info.state).toBe("LIVE");
    expect(info.uptime).toBeGreaterThan(uptimeAtStart);
    const stats = await stack.envoy.stats("^(server\\.hot_restart_epoch|cluster_manager\\.cds\\.update_(success|rejected)|http\\.llm_gateway\\.rds\\.llm_gateway\\.update_(success|rejected)|listener_manager\\.listener_(modified|removed))$");
    expect(stats["server.hot_restart_epoch"]).toBe(0);
    expect(stats["listener_manager.listener_modified"]).toBe(0);
    expect(stats["listener_manager.listener_removed"]).toBe(0);
    expect(stats["cluster_manager.cds.update_rejected"]).toBe(0);
    expect(stats["http.llm_gateway.rds.llm_gateway.update_rejected"]).toBe(0);
    // The start, mistral added, the rate limit, the stream routes' idle timeout, qwen removed, its cluster dropped, qwen back.
    expect(stats["http.llm_gateway.rds.llm_gateway.update_success"]).toBeGreaterThanOrEqual(6);
    expect(await reloads()).toEqual({ applied: 8, refused: 3 });
    // Every Envoy confirmed every change it was sent.
    expect(logs.filter((l) => l.includes("without every Envoy's confirmation"))).toEqual([]);
  });
});
