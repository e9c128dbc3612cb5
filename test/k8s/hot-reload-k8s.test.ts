// Hot reload of pools discovered by label, against a real kube-apiserver: an
// edit of the config file adds a Kubernetes pool (its watch starts and its
// pods become routable), changes a pool's selector (its source is replaced
// by one watching the new selector) and removes a pool (its watch ends),
// on the one Envoy, never restarted.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import https from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, expect, it } from "vitest";
import { stringify } from "yaml";
import { loadGatewayConfig } from "../../host/config.js";
import { startFleet, type Fleet } from "../../testing/fakeserver/index.js";
import { startLocalApiServer, type LocalApiServer } from "../../testing/localkube/apiserver.js";
import { startStack, type Stack } from "../../testing/launcher/stack.js";
import { connect, type Conn } from "../helpers/connections.js";
import { describeWithApiServer, TestPods } from "../helpers/k8s.js";
import { waitFor } from "../helpers/stack.js";

const NAMESPACE = "models";
const LLAMA = "llama-3.1-8b";
const QWEN = "qwen3-32b";
/** Pod name -> the loopback IP its fake model server listens on, and the model it serves. */
const PODS = { a: { ip: "127.0.0.2", model: LLAMA }, b: { ip: "127.0.0.3", model: LLAMA }, c: { ip: "127.0.0.4", model: QWEN } } as const;

describeWithApiServer("hot reload of Kubernetes pools (real API server, aggregator and Envoy)", () => {
  let kube: LocalApiServer;
  let pods: TestPods;
  let stack: Stack;
  let dir: string;
  let configPath: string;
  let port: number;
  let envoyPid: number;
  const fleets: Fleet[] = [];
  const conns: Conn[] = [];
  const logs: string[] = [];
  let doc: Record<string, any>;

  const kubernetesPool = (name: string, model: string, labels: Record<string, string>) => ({
    name,
    baseModel: model,
    kubernetes: { namespace: NAMESPACE, selector: { matchLabels: labels }, port, kubeconfig: kube.writeKubeconfig() },
  });

  /** Writes an edit of the config file and waits until the aggregator applied it. */
  async function edit(change: (d: Record<string, any>) => void): Promise<void> {
    doc = structuredClone(doc);
    change(doc);
    const seen = logs.length;
    writeFileSync(configPath, stringify(doc));
    await waitFor("the edit to be applied", () => {
      const outcome = logs.slice(seen).find((l) => l.includes("config reload"));
      if (outcome?.includes("refused")) throw new Error(outcome);
      return outcome !== undefined;
    }, 20_000);
  }

  /** Open watches of pods in a namespace (the aggregator's: the API server's own watch all namespaces), as the API server counts them. */
  function podWatches(): Promise<number> {
    return new Promise((resolve, reject) => {
      const req = https.get(`${kube.url}/metrics`, { headers: { authorization: `Bearer ${kube.adminToken}` }, rejectUnauthorized: false }, (res) => {
        let text = "";
        res.setEncoding("utf8").on("data", (c: string) => (text += c));
        res.on("end", () => {
          let sum = 0;
          for (const m of text.matchAll(/^apiserver_longrunning_gauge\{([^}]*)\} (\S+)$/gm)) {
            if (['resource="pods"', 'scope="namespace"', 'verb="WATCH"'].every((label) => m[1].includes(label))) sum += Number(m[2]);
          }
          resolve(sum);
        });
      });
      req.on("error", reject);
    });
  }

  const servedBy = async (model: string) => {
    const { response } = await conns[0].client.chat.completions.create({ model, messages: [{ role: "user", content: "hello" }], max_tokens: 4 }).withResponse();
    return response.headers.get("x-served-by");
  };

  beforeAll(async () => {
    kube = await startLocalApiServer();
    pods = new TestPods(kube.kubeConfig(), NAMESPACE);
    await pods.createNamespace();
    // One port for every pod, each on its own loopback IP: the first picks a free port.
    for (const [name, pod] of Object.entries(PODS)) {
      const fleet = await startFleet([{ name, model: pod.model, port: port ?? 0 }], { host: pod.ip });
      fleets.push(fleet);
      port ??= fleet.pods[0].port;
    }
    await pods.create("a", { app: "llama" }, { ip: PODS.a.ip, ready: true });
    await pods.create("b", { app: "llama-next" }, { ip: PODS.b.ip, ready: true });
    await pods.create("c", { app: "qwen" }, { ip: PODS.c.ip, ready: true });

    dir = mkdtempSync(join(tmpdir(), "hot-reload-k8s-"));
    configPath = join(dir, "gateway.yaml");
    doc = {
      gateway: { host: "127.0.0.1", port: 0, adminPort: 0 },
      aggregator: { host: "127.0.0.1", port: 0, metricsPort: 0 },
      profiles: { latency: { admission: { enabled: false } } },
      pools: [kubernetesPool("llama", LLAMA, { app: "llama" })],
    };
    writeFileSync(configPath, stringify(doc));
    stack = await startStack(loadGatewayConfig(configPath), { configPath, configPollMs: 500, metricsPort: false, concurrency: 2, log: (l) => logs.push(l) });
    envoyPid = stack.envoy.pid;
    await connect(stack, 1, "x", conns);
    await waitFor("llama served by pod a", async () => (await servedBy(LLAMA)) === "a", 20_000);
  }, 120_000);

  afterAll(async () => {
    for (const c of conns.splice(0)) c.agent.destroy();
    await stack?.close();
    for (const f of fleets) await f.close();
    await kube?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  }, 60_000);

  it("adds a pool discovered by label: its watch starts and its pods answer", async () => {
    expect(await podWatches()).toBe(1);
    await edit((d) => d.pools.push(kubernetesPool("qwen", QWEN, { app: "qwen" })));
    await waitFor("qwen's watch", async () => (await podWatches()) === 2);
    await waitFor("qwen served by pod c", async () => (await servedBy(QWEN).catch(() => null)) === "c", 20_000);
  });

  it("changes a pool's selector: the pool's source is replaced, and routing follows the new label", async () => {
    await edit((d) => (d.pools[0].kubernetes.selector.matchLabels = { app: "llama-next" }));
    await waitFor("llama served by pod b only", async () => {
      for (let i = 0; i < 4; i++) if ((await servedBy(LLAMA)) !== "b") return false;
      return true;
    }, 20_000);
    await waitFor("the old selector's watch to end", async () => (await podWatches()) === 2, 20_000);
  });

  it("removes a pool: its watch ends and its model is not found", async () => {
    await edit((d) => d.pools.splice(1, 1));
    await waitFor("qwen's watch to end", async () => (await podWatches()) === 1, 20_000);
    await waitFor("qwen to be unknown", async () => {
      const err = await conns[0].client.chat.completions.create({ model: QWEN, messages: [{ role: "user", content: "hi" }], max_tokens: 4 }).catch((e: OpenAI.APIError) => e);
      return err instanceof OpenAI.APIError && err.status === 404 && err.code === "model_not_found";
    });
    expect(stack.envoy.pid).toBe(envoyPid);
  });
});
