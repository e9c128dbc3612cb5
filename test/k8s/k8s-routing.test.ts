// Routing follows Kubernetes: a real kube-apiserver, the real aggregator
// discovering a pool by label, a real Envoy with the filter, and fake model
// servers listening on distinct loopback IPs (127.0.0.2, .3, ...) on one port,
// as pods of a Deployment do. The test creates, readies, relabels, un-readies
// and deletes the Pod objects and sends requests with the official OpenAI
// client through Envoy: only the Ready pods the selector matches answer, and
// Envoy is never restarted.
import { stringify } from "yaml";
import { afterAll, beforeAll, expect, it } from "vitest";
import { parseGatewayConfig } from "../../host/config.js";
import { startFleet, type Fleet } from "../../testing/fakeserver/index.js";
import { startLocalApiServer, type LocalApiServer } from "../../testing/localkube/apiserver.js";
import { startStack, type Stack } from "../../testing/launcher/stack.js";
import { connect, type Conn } from "../helpers/connections.js";
import { describeWithApiServer, TestPods } from "../helpers/k8s.js";
import { waitFor } from "../helpers/stack.js";
import { waitForView } from "../helpers/traffic.js";

const MODEL = "llama-3.1-8b";
const NAMESPACE = "models";
/** Pod name -> the loopback IP its fake model server listens on. */
const IPS = { a: "127.0.0.2", b: "127.0.0.3", c: "127.0.0.4", d: "127.0.0.5" } as const;
type PodName = keyof typeof IPS;
const LLAMA = { app: "llama" };
const QWEN = { app: "qwen" };

/** Envoy's hosts of one pool cluster, as its admin API lists them. */
async function clusterHosts(stack: Stack, pool: string): Promise<string[]> {
  const body = (await (await fetch(`${stack.envoy.adminUrl}/clusters?format=json`)).json()) as {
    cluster_statuses: Array<{ name: string; host_statuses?: Array<{ address: { socket_address: { address: string; port_value: number } } }> }>;
  };
  const cluster = body.cluster_statuses.find((c) => c.name === `llm_gateway_pool_${pool}`);
  return (cluster?.host_statuses ?? []).map((h) => `${h.address.socket_address.address}:${h.address.socket_address.port_value}`).sort();
}

describeWithApiServer("routing follows pods discovered by label (real API server, aggregator and Envoy)", () => {
  let kube: LocalApiServer;
  let pods: TestPods;
  let stack: Stack;
  let port: number;
  let envoyPid: number;
  const fleets: Fleet[] = [];
  const conns: Conn[] = [];

  const address = (pod: PodName) => `${IPS[pod]}:${port}`;

  /** Waits until the aggregator, Envoy's cluster and both workers' snapshots hold exactly these pods. */
  async function untilRouted(expected: PodName[]): Promise<void> {
    const want = expected.map(address).sort();
    const what = `pool llama = [${expected.join(", ")}]`;
    await waitForView(stack, conns, `${what} in the snapshot, all fresh`, (eps) => {
      const got = eps.map((e) => e.address).sort();
      return got.join() === want.join() && eps.every((e) => e.fresh);
    }, 20_000);
    await waitFor(`${what} in Envoy's cluster`, async () => (await clusterHosts(stack, "llama")).join() === want.join(), 20_000);
  }

  /** Sends `n` chat completions over every connection in turn; the pods that answered, by count. */
  async function servedBy(n: number): Promise<Record<string, number>> {
    const counts: Record<string, number> = {};
    for (let i = 0; i < n; i++) {
      const conn = conns[i % conns.length];
      const { response } = await conn.client.chat.completions
        .create({ model: MODEL, messages: [{ role: "user", content: `hello ${i}` }], max_tokens: 4 })
        .withResponse();
      const pod = response.headers.get("x-served-by") ?? "(none)";
      counts[pod] = (counts[pod] ?? 0) + 1;
    }
    return counts;
  }

  beforeAll(async () => {
    kube = await startLocalApiServer();
    pods = new TestPods(kube.kubeConfig(), NAMESPACE);
    await pods.createNamespace();

    // One port for every pod, each on its own loopback IP: the first picks a free port.
    for (const name of Object.keys(IPS) as PodName[]) {
      const fleet = await startFleet([{ name, model: MODEL, port: port ?? 0 }], { host: IPS[name] });
      fleets.push(fleet);
      port ??= fleet.pods[0].port;
    }
    await pods.create("a", LLAMA, { ip: IPS.a, ready: true });
    await pods.create("b", LLAMA, { ip: IPS.b, ready: false });
    await pods.create("c", QWEN, { ip: IPS.c, ready: true });

    const config = parseGatewayConfig(
      stringify({
        gateway: { host: "127.0.0.1", port: 0, adminPort: 0 },
        aggregator: { host: "127.0.0.1", port: 0, metricsPort: 0 },
        // Routing, not admission, is under test: a few small pods must not refuse the bursts.
        profiles: { latency: { admission: { enabled: false } } },
        pools: [
          {
            name: "llama",
            baseModel: MODEL,
            kubernetes: { namespace: NAMESPACE, selector: { matchLabels: LLAMA }, port, kubeconfig: kube.writeKubeconfig() },
          },
        ],
      }),
      "k8s routing",
    );
    stack = await startStack(config, { metricsPort: false, concurrency: 2 });
    envoyPid = stack.envoy.pid;
    await connect(stack, 1, "x", conns);
  }, 120_000);

  afterAll(async () => {
    for (const c of conns.splice(0)) c.agent.destroy();
    await stack?.close();
    for (const f of fleets) await f.close();
    await kube?.stop();
  }, 60_000);

  it("routes only to the Ready pods the selector matches", async () => {
    await untilRouted(["a"]);
    expect(await servedBy(8)).toEqual({ a: 8 });
  });

  it("takes a pod in when it turns Ready, and out when it stops being Ready", async () => {
    await pods.setState("b", { ip: IPS.b, ready: true });
    await untilRouted(["a", "b"]);
    expect(Object.keys(await servedBy(8)).every((p) => p === "a" || p === "b")).toBe(true);
    await pods.setState("a", { ip: IPS.a, ready: false });
    await untilRouted(["b"]);
    expect(await servedBy(8)).toEqual({ b: 8 });
  });

  it("follows relabelling into and out of the selector", async () => {
    await pods.relabel("c", LLAMA);
    await pods.relabel("b", QWEN);
    await untilRouted(["c"]);
    expect(await servedBy(8)).toEqual({ c: 8 });
  });

  it("sends a deleted pod no more requests, from the moment its deletion starts", async () => {
    await pods.create("d", LLAMA, { ip: IPS.d, ready: true });
    await untilRouted(["c", "d"]);
    expect(Object.keys(await servedBy(8)).every((p) => p === "c" || p === "d")).toBe(true);
    // Terminating (deletionTimestamp set, the Pod still stored and still Ready): out already.
    await pods.beginDelete("c");
    await untilRouted(["d"]);
    expect(await servedBy(8)).toEqual({ d: 8 });
    await pods.remove("c");
    expect(await servedBy(4)).toEqual({ d: 4 });
  });

  it("refuses with 503 while no pod is Ready (fail closed), and routes again when one is", async () => {
    await pods.setState("d", { ip: IPS.d, ready: false });
    await untilRouted([]);
    const refused = await conns[0].client.chat.completions
      .create({ model: MODEL, messages: [{ role: "user", content: "anyone?" }], max_tokens: 4 })
      .catch((err: unknown) => err);
    expect(refused).toMatchObject({ status: 503, code: "no_endpoint" });
    await pods.setState("d", { ip: IPS.d, ready: true });
    await untilRouted(["d"]);
    expect(await servedBy(4)).toEqual({ d: 4 });
  });

  it("did all of it on the one Envoy, never restarted", async () => {
    expect(stack.envoy.pid).toBe(envoyPid);
    expect(() => process.kill(envoyPid, 0)).not.toThrow();
    const stats = await stack.envoy.stats("^cluster\\.llm_gateway_pool_llama\\.(membership_change|update_success)$");
    // Every change above reached Envoy as an endpoint update, not a new process:
    // [a], [a b], [b], [c], [c d], [d], [], [d] at least (some may come in more steps).
    expect(stats["cluster.llm_gateway_pool_llama.membership_change"]).toBeGreaterThanOrEqual(8);
  });
});
