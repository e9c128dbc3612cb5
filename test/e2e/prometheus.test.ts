// The operator's view, end to end: a real Prometheus (Debian's package,
// scripts/ci/install-prometheus.sh) finds Envoy's stats listener and the
// aggregator's /metrics as Pods of a real kube-apiserver (their status, as a
// kubelet would set it, puts them on loopback), relabelled by the shipped
// scrape config (deploy/prometheus/scrape-config.yaml) the way the
// Prometheus Operator's monitors label targets (namespace, pod, container,
// endpoint, service, job), and scrapes them every second while the openai client drives traffic through
// the gateway (plain and streamed answers with usage, a LoRA adapter, 404s,
// 400s and 429s from a saturated pool, a dead pod). Then every query of the
// Grafana dashboard (deploy/grafana/llm-gateway-dashboard.json), its
// variables substituted, must return data: at least one series with a finite
// value; and no label of ours may have been renamed `exported_*`.
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync, openSync, closeSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse as parseYaml, stringify } from "yaml";
import { parseGatewayConfig } from "../../host/config.js";
import { startFleet, type Fleet } from "../../testing/fakeserver/index.js";
import { projectRoot } from "../../host/paths.js";
import { startStack, type Stack } from "../../testing/launcher/stack.js";
import { apiServerBinaries, startLocalApiServer, type LocalApiServer } from "../../testing/localkube/apiserver.js";
import { TestPods } from "../helpers/k8s.js";
import { skipWithout } from "../helpers/requirements.js";
import { waitFor } from "../helpers/stack.js";

const LLAMA = "meta-llama/Llama-3.1-8B-Instruct";
const ADAPTER = "sql-lora";
const BUSY = "qwen-busy";
const DASHBOARD = join(projectRoot, "deploy", "grafana", "llm-gateway-dashboard.json");
const SCRAPE_CONFIG = join(projectRoot, "deploy", "prometheus", "scrape-config.yaml");
const NAMESPACE = "llm-gateway";

interface Panel {
  title?: string;
  targets?: Array<{ expr?: string }>;
  panels?: Panel[];
}

interface Dashboard {
  panels: Panel[];
  templating: { list: Array<{ type: string; name: string; query?: { query: string } }> };
}

const dashboard = () => JSON.parse(readFileSync(DASHBOARD, "utf8")) as Dashboard;

/** `$name` replaced by its value in `values`, as Grafana interpolates a variable into a query. */
function substitute(expr: string, values: Record<string, string>): string {
  return expr.replace(/\$(\w+)/g, (whole, name: string) => values[name] ?? whole);
}

/** Every query of the dashboard, with its panel's title. */
function dashboardQueries(): Array<{ panel: string; expr: string }> {
  const walk = (panels: Panel[]): Array<{ panel: string; expr: string }> =>
    panels.flatMap((p) => [
      ...(p.targets ?? []).flatMap((t) => (t.expr ? [{ panel: p.title ?? "", expr: t.expr }] : [])),
      ...walk(p.panels ?? []),
    ]);
  return walk(dashboard().panels);
}

/** The dashboard's query variables: name and Grafana's `label_values(<selector>, <label>)` split. */
function dashboardVariables(): Array<{ name: string; selector: string; label: string }> {
  return dashboard().templating.list.filter((v) => v.type === "query").map((v) => {
    const m = /^label_values\((.+),\s*(\w+)\)$/.exec(v.query!.query);
    if (!m) throw new Error(`variable ${v.name}: not label_values(selector, label): ${v.query!.query}`);
    return { name: v.name, selector: m[1], label: m[2] };
  });
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
  /** GET /api/v1/<path>: its data. */
  api<T>(path: string): Promise<T>;
  stop(): Promise<void>;
}

const meta = (name: string) => `__meta_kubernetes_${name}`;
/** How Prometheus' Kubernetes discovery turns a label or annotation key into part of a label name. */
const sanitized = (key: string) => key.replace(/[^a-zA-Z0-9_]/g, "_");

/**
 * What `kubernetes_sd_configs` with `role: pod` makes of the Pods: one target
 * per container port, with its `__meta_kubernetes_*` labels. Debian builds
 * its prometheus without Kubernetes discovery, so the test reads the Pods
 * from the API server itself and hands them over as file_sd target groups;
 * the relabelling is the shipped config's, unchanged.
 */
async function podTargets(pods: TestPods): Promise<object[]> {
  const list = await pods.api.listNamespacedPod({ namespace: pods.namespace });
  return list.items.flatMap((pod) => (pod.spec?.containers ?? []).flatMap((c) => (c.ports ?? []).map((port) => ({
    targets: [`${pod.status!.podIP}:${port.containerPort}`],
    labels: {
      [meta("namespace")]: pod.metadata!.namespace!,
      [meta("pod_name")]: pod.metadata!.name!,
      [meta("pod_ip")]: pod.status!.podIP!,
      [meta("pod_ready")]: String(pod.status?.conditions?.some((k) => k.type === "Ready" && k.status === "True") ?? false),
      [meta("pod_container_name")]: c.name,
      [meta("pod_container_port_name")]: port.name ?? "",
      [meta("pod_container_port_number")]: String(port.containerPort),
      ...Object.fromEntries(Object.entries(pod.metadata!.labels ?? {}).map(([k, v]) => [meta(`pod_label_${sanitized(k)}`), v])),
      ...Object.fromEntries(Object.entries(pod.metadata!.annotations ?? {}).map(([k, v]) => [meta(`pod_annotation_${sanitized(k)}`), v])),
    },
  }))));
}

/**
 * The shipped scrape config (deploy/prometheus/scrape-config.yaml), its
 * Kubernetes discovery swapped for the file holding the same target groups.
 */
function shippedScrapeConfig(targetsFile: string): object {
  const [config, ...rest] = parseYaml(readFileSync(SCRAPE_CONFIG, "utf8")) as Array<Record<string, unknown>>;
  expect(rest).toEqual([]);
  expect(config.kubernetes_sd_configs).toEqual([{ role: "pod" }]);
  const { kubernetes_sd_configs: _, ...others } = config;
  return { ...others, file_sd_configs: [{ files: [targetsFile] }] };
}

/** Debian's prometheus on 127.0.0.1 with a generated config and a temp TSDB, scraping every second. */
async function startPrometheus(dir: string, scrapeConfigs: object[]): Promise<Prometheus> {
  const port = await freePort();
  const config = {
    global: { scrape_interval: "1s", scrape_timeout: "900ms", evaluation_interval: "1s" },
    scrape_configs: scrapeConfigs,
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
    async api<T>(path: string) {
      const body = (await (await fetch(`${url}/api/v1/${path}`)).json()) as { status: string; error?: string; data: T };
      if (body.status !== "success") throw new Error(`GET /api/v1/${path} failed: ${body.error}`);
      return body.data;
    },
    stop,
  };
}

const SUITE = "a real Prometheus scraping Envoy and the aggregator found through Kubernetes service discovery";
const skip =
  skipWithout(!spawnSync("prometheus", ["--version"]).error, SUITE, "prometheus is not installed: run scripts/ci/install-prometheus.sh") ||
  skipWithout(apiServerBinaries() !== null, SUITE, "kube-apiserver and etcd are not built: run scripts/kube/build-apiserver.sh");

/** A Pod labelled as the Kubernetes base labels the component, its `metrics` port at `port` on loopback (the status a kubelet would report). */
async function scrapedPod(pods: TestPods, component: string, port: number): Promise<void> {
  await pods.api.createNamespacedPod({
    namespace: pods.namespace,
    body: {
      metadata: {
        name: `llm-gateway-${component}-0`,
        labels: { "app.kubernetes.io/name": "llm-gateway", "app.kubernetes.io/component": component },
      },
      spec: { nodeName: "no-such-node", containers: [{ name: component, image: "llm-gateway:test", ports: [{ name: "metrics", containerPort: port }] }] },
    },
  });
  await pods.setState(`llm-gateway-${component}-0`, { ip: "127.0.0.1", ready: true });
}

describe.skipIf(skip)(SUITE, () => {
  let dir: string;
  let fleet: Fleet;
  let stack: Stack | undefined;
  let prometheus: Prometheus | undefined;
  let api: LocalApiServer | undefined;
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
    api = await startLocalApiServer();
    const pods = new TestPods(api.kubeConfig(), NAMESPACE);
    await pods.createNamespace();
    await scrapedPod(pods, "envoy", statsPort);
    await scrapedPod(pods, "aggregator", stack.aggregator.metricsPort);
    const targetsFile = join(dir, "pods.json");
    writeFileSync(targetsFile, JSON.stringify(await podTargets(pods)));
    prometheus = await startPrometheus(dir, [shippedScrapeConfig(targetsFile)]);
    await waitFor("both pods discovered and up", async () => (await prometheus!.query("up == 1")).length === 2, 30_000);
  }, 120_000);

  afterAll(async () => {
    await prometheus?.stop();
    await api?.stop();
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

    // Answers until Prometheus has seen Envoy's request-time histogram (Envoy flushes histograms
    // every 5 s) and the time to first token move, and the streamed answer is over.
    let streamDone = false;
    void streamed.finally(() => (streamDone = true));
    const moved = async (series: string) => (await prometheus!.query(`rate(${series}[1m]) > 0`)).length > 0;
    const histogramsMoved = async () => (await moved("envoy_cluster_upstream_rq_time_count")) && (await moved("llm_gateway_time_to_first_token_seconds_count"));
    // A short stream now and then, so the time to first token moves across scrapes too (rate() needs an increase).
    const shortStream = async (n: number) => {
      const stream = await client.chat.completions.create({ model: LLAMA, messages: [{ role: "user", content: `stream ${n}` }], max_tokens: 4, stream: true });
      let chunks = 0;
      for await (const _ of stream) chunks++;
      expect(chunks).toBeGreaterThan(0);
    };
    const deadline = Date.now() + 60_000;
    for (let n = 0; ; n++) {
      if (n % 5 === 4) await shortStream(n);
      else expect((await ask(LLAMA, n)).usage?.prompt_tokens).toBeGreaterThan(0);
      if (n % 10 === 9 && streamDone && (await histogramsMoved())) break;
      if (Date.now() > deadline) throw new Error(`Prometheus saw no request time after ${n + 1} requests`);
    }
    expect(await streamed).toMatchObject({ completion_tokens: 300 });

    // rate() needs two samples of a series in its window.
    await waitFor("two scrapes of the 429s", async () => (await prometheus!.query('count_over_time(llm_gateway_requests_refused_total{status="429"}[1m]) >= 2')).length > 0, 15_000);

    // The targets carry the labels Kubernetes discovery gave them.
    const up = await prometheus!.query("up");
    expect(up.map((s) => s.metric).sort((a, b) => a.job.localeCompare(b.job))).toEqual([
      { __name__: "up", job: "llm-gateway-aggregator", namespace: NAMESPACE, pod: "llm-gateway-aggregator-0", container: "aggregator", endpoint: "metrics", service: "llm-gateway-aggregator", instance: `127.0.0.1:${stack!.aggregator.metricsPort}` },
      { __name__: "up", job: "llm-gateway-envoy", namespace: NAMESPACE, pod: "llm-gateway-envoy-0", container: "envoy", endpoint: "metrics", service: "llm-gateway-envoy", instance: `127.0.0.1:${statsPort}` },
    ]);
    // None of our labels collided with them.
    const labels = await prometheus!.api<string[]>("labels");
    expect(labels.filter((l) => l.startsWith("exported_"))).toEqual([]);
    expect(labels).toContain("model_server");
    const picks = await prometheus!.query("llm_gateway_pod_picks_total");
    expect(new Set(picks.map((s) => s.metric.pod))).toEqual(new Set(["llm-gateway-envoy-0"]));
    expect(picks.map((s) => s.metric.model_server)).toEqual(expect.arrayContaining([fleet.pod("a").address, fleet.pod("b").address]));

    // Each variable offers the values an operator picks from (the ones before it at All).
    const all: Record<string, string> = { namespace: ".*", job: ".*", pool: ".*", model: ".*" };
    const offered: Record<string, string[]> = {};
    for (const v of dashboardVariables()) {
      offered[v.name] = await prometheus!.api<string[]>(`label/${v.label}/values?match[]=${encodeURIComponent(substitute(v.selector, all))}`);
    }
    const { model: models, ...rest } = offered;
    expect(rest).toEqual({
      namespace: [NAMESPACE],
      job: ["llm-gateway-aggregator", "llm-gateway-envoy"],
      pool: ["busy", "llama"],
    });
    // The busy model is there only if a try reached its pod before Envoy had the saturated view.
    expect(models).toEqual(expect.arrayContaining([LLAMA, ADAPTER]));
    expect(models.filter((m) => ![LLAMA, ADAPTER, BUSY].includes(m))).toEqual([]);

    // Every query answers with the namespace picked and the rest at All, and with one pool and model picked.
    const empty: string[] = [];
    const answers = async (values: Record<string, string>) => {
      for (const { panel, expr } of dashboardQueries()) {
        const query = substitute(expr, values);
        expect(query, panel).not.toContain("$");
        const result = await prometheus!.query(query);
        if (!result.some((s) => Number.isFinite(Number(s.value[1])))) empty.push(`${panel}: ${query} -> ${JSON.stringify(result)}`);
      }
    };
    await answers({ ...all, namespace: NAMESPACE });
    await answers({ namespace: NAMESPACE, job: "llm-gateway-envoy|llm-gateway-aggregator", pool: "llama", model: LLAMA.replace(/\./g, "\\\\.") });
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
