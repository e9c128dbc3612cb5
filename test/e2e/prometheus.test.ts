// The operator's view, end to end: a real Prometheus (Debian's package,
// scripts/ci/install-prometheus.sh) scrapes Envoy's /stats/prometheus and the
// aggregator's /metrics every second while the openai client drives traffic
// through the gateway (plain and streamed answers with usage, a LoRA adapter,
// 404s, 400s and 429s from a saturated pool, a dead pod), and then every query
// of the Grafana dashboard (deploy/grafana/llm-gateway-dashboard.json) must
// return data: at least one series with a finite value.
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync, openSync, closeSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { parseGatewayConfig } from "../../host/config.js";
import { startFleet, type Fleet } from "../../testing/fakeserver/index.js";
import { projectRoot } from "../../host/paths.js";
import { startStack, type Stack } from "../../testing/launcher/stack.js";
import { skipWithout } from "../helpers/requirements.js";
import { waitFor } from "../helpers/stack.js";

const LLAMA = "meta-llama/Llama-3.1-8B-Instruct";
const ADAPTER = "sql-lora";
const BUSY = "qwen-busy";
const DASHBOARD = join(projectRoot, "deploy", "grafana", "llm-gateway-dashboard.json");

interface Panel {
  title?: string;
  targets?: Array<{ expr?: string }>;
  panels?: Panel[];
}

/** Every query of the dashboard, with its panel's title. */
function dashboardQueries(): Array<{ panel: string; expr: string }> {
  const walk = (panels: Panel[]): Array<{ panel: string; expr: string }> =>
    panels.flatMap((p) => [
      ...(p.targets ?? []).flatMap((t) => (t.expr ? [{ panel: p.title ?? "", expr: t.expr }] : [])),
      ...walk(p.panels ?? []),
    ]);
  return walk((JSON.parse(readFileSync(DASHBOARD, "utf8")) as { panels: Panel[] }).panels);
}

async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as net.AddressInfo).port;
  await new Promise<void>((r) => server.close(() => r()));
  return port;
}

interface Prometheus {
  url: string;
  query(expr: string): Promise<Array<{ metric: Record<string, string>; value: [number, string] }>>;
  stop(): Promise<void>;
}

/** Debian's prometheus on 127.0.0.1 with a generated config and a temp TSDB, scraping `targets` (job -> [address, path]) every second. */
async function startPrometheus(dir: string, targets: Record<string, [string, string]>): Promise<Prometheus> {
  const port = await freePort();
  const config = {
    global: { scrape_interval: "1s", scrape_timeout: "900ms", evaluation_interval: "1s" },
    scrape_configs: Object.entries(targets).map(([job, [address, path]]) => ({ job_name: job, metrics_path: path, static_configs: [{ targets: [address] }] })),
  };
  writeFileSync(join(dir, "prometheus.yml"), stringify(config));
  const log = openSync(join(dir, "prometheus.log"), "a");
  const child: ChildProcess = spawn("prometheus", [
    `--config.file=${join(dir, "prometheus.yml")}`,
    `--storage.tsdb.path=${join(dir, "tsdb")}`,
    `--web.listen-address=127.0.0.1:${port}`,
    "--log.level=warn",
  ], { stdio: ["ignore", log, log] });
  closeSync(log);
  const url = `http://127.0.0.1:${port}`;
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  const stop = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill("SIGTERM");
    const killer = setTimeout(() => child.kill("SIGKILL"), 10_000);
    await exited;
    clearTimeout(killer);
  };
  try {
    await waitFor("prometheus to be ready", async () => {
      if (child.exitCode !== null) throw new Error(`prometheus exited: ${readFileSync(join(dir, "prometheus.log"), "utf8")}`);
      return (await fetch(`${url}/-/ready`).catch(() => null))?.status === 200;
    }, 30_000);
  } catch (err) {
    await stop();
    throw err;
  }
  return {
    url,
    async query(expr) {
      const res = await fetch(`${url}/api/v1/query?query=${encodeURIComponent(expr)}`);
      const body = (await res.json()) as { status: string; error?: string; data?: { resultType: string; result: never[] } };
      if (body.status !== "success") throw new Error(`query ${expr} failed: ${body.error}`);
      if (body.data!.resultType !== "vector") throw new Error(`query ${expr} gave a ${body.data!.resultType}, not a vector`);
      return body.data!.result;
    },
    stop,
  };
}

const SUITE = "a real Prometheus scraping Envoy and the aggregator";
const skip = skipWithout(!spawnSync("prometheus", ["--version"]).error, SUITE, "prometheus is not installed: run scripts/ci/install-prometheus.sh");

describe.skipIf(skip)(SUITE, () => {
  let dir: string;
  let fleet: Fleet;
  let stack: Stack | undefined;
  let prometheus: Prometheus | undefined;
  let statsPort: number;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "gw-prometheus-"));
    fleet = await startFleet([
      { name: "a", model: LLAMA, adapters: [ADAPTER] },
      { name: "b", model: LLAMA, adapters: [ADAPTER] },
      // One sequence at a time, so load injected into it queues and its pool saturates.
      { name: "busy", model: BUSY, engineConfig: { maxNumSeqs: 1 } },
    ]);
    const dead = await freePort(); // a pod that never answers: scrape errors, a stale pod
    // Prometheus reads Envoy through the stats listener, as in a cluster where admin stays on loopback.
    const adminPort = await freePort();
    statsPort = await freePort();
    const config = parseGatewayConfig(stringify({
      gateway: { host: "127.0.0.1", port: 0, adminPort, statsPort },
      aggregator: { host: "127.0.0.1", port: 0, metricsPort: 0, scrapeIntervalMs: 50, staleAfterMs: 1000 },
      pools: [
        { name: "llama", baseModel: LLAMA, engine: "vllm", adapters: [ADAPTER], endpoints: [fleet.pod("a").address, fleet.pod("b").address, `127.0.0.1:${dead}`] },
        // It batches one sequence, as its engine: what waits behind it is a queue.
        { name: "busy", baseModel: BUSY, engine: "vllm", batchSlots: 1, endpoints: [fleet.pod("busy").address] },
      ],
    }), "prometheus test");
    stack = await startStack(config, { metricsPort: 0, concurrency: 2 });
    prometheus = await startPrometheus(dir, {
      envoy: [`127.0.0.1:${statsPort}`, "/stats/prometheus"],
      aggregator: [`127.0.0.1:${stack.aggregator.metricsPort}`, "/metrics"],
    });
    await waitFor("both targets up", async () => (await prometheus!.query("up == 1")).length === 2, 15_000);
  }, 90_000);

  afterAll(async () => {
    await prometheus?.stop();
    await stack?.close();
    await fleet?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it("answers every query of the dashboard with data after an end-to-end run", async () => {
    const client = new OpenAI({ baseURL: `${stack!.gatewayUrl}/v1`, apiKey: "unused", maxRetries: 0 });
    const ask = (model: string, n: number, headers: Record<string, string> = {}) =>
      client.chat.completions.create({ model, messages: [{ role: "user", content: `question ${n}` }], max_tokens: 8 }, { headers });

    // Refusals first, so their series exist while Prometheus scrapes the rest.
    // Client errors: a model nobody serves (404), a body that is not JSON (400).
    await expect(ask("no-such-model", 0)).rejects.toMatchObject({ status: 404 });
    const bad = await fetch(`${stack!.gatewayUrl}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: "{not json" });
    expect(bad.status).toBe(400);

    // The busy pool saturates: its queue past Sheddable's limit, Sheddable requests that will not be held
    // (x-llm-max-wait-ms: 0) get 429.
    fleet.pod("busy").injectLoad({ requests: 6, promptTokens: 64, maxTokens: 4000 });
    await waitFor("the busy pod's queue in the view", () => stack!.aggregator.current().pools[1].endpoints[0].waiting >= 3, 10_000);
    // Envoy gets the view a moment after the aggregator has it: until then a
    // Sheddable request may still be admitted, and would wait behind the
    // injected load, so each try gives up after a second.
    let refused: unknown = null;
    for (let n = 0; n < 20 && refused === null; n++) {
      const outcome = await client.chat.completions
        .create({ model: BUSY, messages: [{ role: "user", content: `shed ${n}` }], max_tokens: 8 }, { headers: { "x-llm-priority": "sheddable", "x-llm-max-wait-ms": "0" }, timeout: 1000 })
        .then(() => null, (err: unknown) => err);
      if ((outcome as { status?: number } | null)?.status === 429) refused = outcome;
    }
    expect(refused).toMatchObject({ status: 429 });

    // A long streamed answer on the adapter, with usage, while the rest goes on.
    const streamed = (async () => {
      const stream = await client.chat.completions.create({
        model: ADAPTER, messages: [{ role: "user", content: "write a long query" }], max_tokens: 300, stream: true, stream_options: { include_usage: true },
      });
      let usage = null;
      for await (const chunk of stream) usage = chunk.usage ?? usage;
      return usage;
    })();

    // Plain answers until Prometheus has seen the decision-time histogram move (Envoy flushes
    // histograms every 5 s, and times one decision in 16) and the streamed answer is over.
    let streamDone = false;
    void streamed.finally(() => (streamDone = true));
    const histogramMoved = async () => (await prometheus!.query("rate(llm_gateway_decision_time_us_count[1m]) > 0")).length > 0;
    const deadline = Date.now() + 60_000;
    for (let n = 0; ; n++) {
      expect((await ask(LLAMA, n)).usage?.prompt_tokens).toBeGreaterThan(0);
      if (n % 10 === 9 && streamDone && (await histogramMoved())) break;
      if (Date.now() > deadline) throw new Error(`Prometheus saw no decision time after ${n + 1} requests`);
    }
    expect(await streamed).toMatchObject({ completion_tokens: 300 });

    // rate() needs two samples of a series in its window.
    await waitFor("two scrapes of the 429s", async () => (await prometheus!.query('count_over_time(llm_gateway_requests_refused{status="429"}[1m]) >= 2')).length > 0, 15_000);

    const empty: string[] = [];
    for (const { panel, expr } of dashboardQueries()) {
      const result = await prometheus!.query(expr);
      if (!result.some((s) => Number.isFinite(Number(s.value[1])))) empty.push(`${panel}: ${expr} -> ${JSON.stringify(result)}`);
    }
    expect(empty).toEqual([]);

    // The stats listener forwards that one read and nothing else of admin.
    const statsUrl = `http://127.0.0.1:${statsPort}`;
    expect((await fetch(`${statsUrl}/quitquitquit`, { method: "POST" })).status).toBe(404);
    expect((await fetch(`${statsUrl}/stats/prometheus`, { method: "POST" })).status).toBe(404);
    expect((await fetch(`${statsUrl}/clusters`)).status).toBe(404);
    expect((await fetch(`${stack!.envoy.adminUrl}/ready`)).status).toBe(200);
    expect(dashboardQueries().length).toBeGreaterThan(25);
  }, 120_000);
});
