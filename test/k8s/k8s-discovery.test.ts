// The Kubernetes discovery source against a real kube-apiserver: pods are
// created, given an IP and readiness (no kubelet: the test writes their
// status), relabelled, un-readied and deleted, and the pool's target set
// follows; a cut connection resumes from its resourceVersion, and a restarted
// server that has forgotten it makes the source list again.
import { afterAll, afterEach, beforeAll, expect, it } from "vitest";
import { kubernetesSource, loadKubeConfig, type KubernetesPool } from "../../host/discovery/kubernetes.js";
import type { DiscoverySource } from "../../host/discovery/source.js";
import { startLocalApiServer, type LocalApiServer } from "../../testing/localkube/apiserver.js";
import { ApiRelay, describeWithApiServer, RecordingSink, TestPods } from "../helpers/k8s.js";
import { waitFor } from "../helpers/stack.js";

const PORT = 8000;
const pool = (name: string, namespace: string, selector = "app=llama"): KubernetesPool => ({ name, kubernetes: { namespace, selector, port: PORT } });
const at = (name: string, ip: string) => `${name} ${ip}:${PORT}`;

describeWithApiServer("Kubernetes discovery against a real API server", () => {
  let server: LocalApiServer;
  const sources: DiscoverySource[] = [];
  const logs: string[] = [];
  const log = (line: string) => logs.push(line);
  /** Starts a source and waits for its first answer. */
  const start = async (source: DiscoverySource, sink: RecordingSink) => {
    sources.push(source);
    await source.start(sink);
    return source;
  };

  beforeAll(async () => {
    server = await startLocalApiServer();
  }, 90_000);
  afterEach(() => {
    for (const s of sources.splice(0)) s.close();
  });
  afterAll(async () => {
    await server?.stop();
  });

  it("takes a pod in when it is Ready with an IP and not being deleted, and out otherwise", async () => {
    const pods = new TestPods(server.kubeConfig(), "lifecycle");
    await pods.createNamespace();
    await pods.create("a", { app: "llama" }, { ip: "10.0.0.1", ready: true });
    await pods.create("b", { app: "llama" }, { ip: "10.0.0.2", ready: false });
    await pods.create("c", { app: "qwen" }, { ip: "10.0.0.3", ready: true });
    await pods.create("d", { app: "llama" }, { ready: true }); // Ready, but no IP yet

    const sink = new RecordingSink();
    await start(kubernetesSource(pool("llama", "lifecycle"), { kubeConfig: server.kubeConfig(), log }), sink);
    // The first answer comes from the list, before start() resolves.
    expect(sink.current("llama")).toEqual([at("a", "10.0.0.1")]);
    expect(sink.latest("llama")![0]).toEqual({ ip: "10.0.0.1", port: PORT, address: "10.0.0.1:8000", name: "a", hostHeader: "10.0.0.1:8000" });

    await pods.setState("b", { ip: "10.0.0.2", ready: true });
    await sink.until("llama", [at("a", "10.0.0.1"), at("b", "10.0.0.2")]);
    await pods.setState("d", { ip: "10.0.0.4", ready: true });
    await sink.until("llama", [at("a", "10.0.0.1"), at("b", "10.0.0.2"), at("d", "10.0.0.4")]);

    // Out of the selector and into it.
    await pods.relabel("a", { app: "qwen" });
    await pods.relabel("c", { app: "llama", tier: "canary" });
    await sink.until("llama", [at("b", "10.0.0.2"), at("c", "10.0.0.3"), at("d", "10.0.0.4")]);

    await pods.setState("b", { ip: "10.0.0.2", ready: false });
    await sink.until("llama", [at("c", "10.0.0.3"), at("d", "10.0.0.4")]);

    // Terminating: still stored, with a deletionTimestamp, and no longer routed to.
    const terminating = await pods.beginDelete("c");
    expect(terminating.metadata?.deletionTimestamp).toBeDefined();
    await sink.until("llama", [at("d", "10.0.0.4")]);
    await pods.remove("c");
    await pods.remove("d");
    await sink.until("llama", []);

    const kinds = (kind: "added" | "removed") => sink.eventsOf("llama", kind).map((e) => e.detail);
    expect(kinds("added")).toEqual([at("a", "10.0.0.1"), at("b", "10.0.0.2"), at("d", "10.0.0.4"), at("c", "10.0.0.3")]);
    expect(kinds("removed").sort()).toEqual([at("a", "10.0.0.1"), at("b", "10.0.0.2"), at("c", "10.0.0.3"), at("d", "10.0.0.4")]);
    expect(sink.eventsOf("llama", "error")).toEqual([]);
    expect(sink.eventsOf("llama", "relist")).toEqual([]);
  });

  it("serves two pools in two namespaces, each with its own pods only", async () => {
    const east = new TestPods(server.kubeConfig(), "east");
    const west = new TestPods(server.kubeConfig(), "west");
    await east.createNamespace();
    await west.createNamespace();
    // The same labels in both namespaces: the namespace alone keeps the pools apart.
    await east.create("e1", { app: "llama" }, { ip: "10.1.0.1", ready: true });
    await west.create("w1", { app: "llama" }, { ip: "10.2.0.1", ready: true });
    await west.create("w2", { app: "qwen" }, { ip: "10.2.0.2", ready: true });

    const sink = new RecordingSink();
    // One source per pool, as the aggregator builds them, reporting to one sink.
    const opts = { kubeConfig: server.kubeConfig(), log };
    await Promise.all([start(kubernetesSource(pool("east", "east"), opts), sink), start(kubernetesSource(pool("west", "west", "app in (llama, qwen)"), opts), sink)]);
    expect(sink.current("east")).toEqual([at("e1", "10.1.0.1")]);
    expect(sink.current("west")).toEqual([at("w1", "10.2.0.1"), at("w2", "10.2.0.2")]);

    await east.create("e2", { app: "llama" }, { ip: "10.1.0.2", ready: true });
    await west.remove("w1");
    await sink.until("east", [at("e1", "10.1.0.1"), at("e2", "10.1.0.2")]);
    await sink.until("west", [at("w2", "10.2.0.2")]);
    // Each change reached only its own pool.
    expect(sink.reports.get("east")!.flat().some((t) => t.name.startsWith("w"))).toBe(false);
    expect(sink.reports.get("west")!.flat().some((t) => t.name.startsWith("e"))).toBe(false);
  });

  it("answers with an empty pool while the API server is unreachable, backs off, and follows it once it answers", async () => {
    const pods = new TestPods(server.kubeConfig(), "unreachable");
    await pods.createNamespace();
    await pods.create("u1", { app: "llama" }, { ip: "10.3.0.1", ready: true });
    const relay = new ApiRelay({ host: "127.0.0.1", port: Number(new URL(server.url).port) });
    await relay.restore();
    await relay.cut(); // the port is known, nothing listens on it

    const kc = server.kubeConfig();
    kc.clusters[0] = { ...kc.clusters[0], server: relay.url };
    const sink = new RecordingSink();
    await start(kubernetesSource(pool("llama", "unreachable"), { kubeConfig: kc, log }), sink);
    // Fail closed: nothing to route to until the API server says what exists.
    expect(sink.current("llama")).toEqual([]);
    await waitFor("a few failed attempts", () => sink.eventsOf("llama", "error").length >= 3);
    const errors = sink.eventsOf("llama", "error");
    expect(errors[0].detail).toMatch(/ECONNREFUSED/);
    // Backing off: a handful of attempts, not a busy loop (first delays 0.25-0.5 s, 0.5-1 s, 1-2 s).
    await new Promise((r) => setTimeout(r, 1000));
    expect(sink.eventsOf("llama", "error").length).toBeLessThan(8);

    await relay.restore();
    try {
      await sink.until("llama", [at("u1", "10.3.0.1")]);
    } finally {
      await relay.cut();
    }
  });

  it("resumes a cut watch from its resourceVersion: changes made meanwhile arrive, with no re-list", async () => {
    const pods = new TestPods(server.kubeConfig(), "cut");
    await pods.createNamespace();
    await pods.create("k1", { app: "llama" }, { ip: "10.4.0.1", ready: true });
    await pods.create("k2", { app: "llama" }, { ip: "10.4.0.2", ready: false });
    const relay = new ApiRelay({ host: "127.0.0.1", port: Number(new URL(server.url).port) });
    await relay.restore();
    try {
      const kc = server.kubeConfig();
      kc.clusters[0] = { ...kc.clusters[0], server: relay.url };
      const sink = new RecordingSink();
      await start(kubernetesSource(pool("llama", "cut"), { kubeConfig: kc, log }), sink);
      expect(sink.current("llama")).toEqual([at("k1", "10.4.0.1")]);
      // Let the watch open before cutting it (a change it delivers shows it is).
      await pods.create("k0", { app: "llama" }, { ip: "10.4.0.9", ready: true });
      await sink.until("llama", [at("k0", "10.4.0.9"), at("k1", "10.4.0.1")]);

      await relay.cut();
      await waitFor("the source to notice the cut", () => sink.eventsOf("llama", "error").length > 0);
      // Changed behind the source's back (the test talks to the server directly).
      await pods.setState("k2", { ip: "10.4.0.2", ready: true });
      await pods.remove("k1");
      await relay.restore();

      await sink.until("llama", [at("k0", "10.4.0.9"), at("k2", "10.4.0.2")]);
      expect(sink.eventsOf("llama", "relist")).toEqual([]);
    } finally {
      await relay.cut();
    }
  });

  it("lists again when a restarted API server no longer has the watch's resourceVersion (410 Gone)", async () => {
    const pods = new TestPods(server.kubeConfig(), "restart");
    await pods.createNamespace();
    await pods.create("r1", { app: "llama" }, { ip: "10.5.0.1", ready: true });
    const sink = new RecordingSink();
    await start(kubernetesSource(pool("llama", "restart"), { kubeConfig: server.kubeConfig(), log }), sink);
    expect(sink.current("llama")).toEqual([at("r1", "10.5.0.1")]);

    // A write the pool's watch does not see moves etcd past the source's
    // resourceVersion; the restarted server's watch cache starts there.
    const other = new TestPods(server.kubeConfig(), "restart-other");
    await other.createNamespace();
    await server.restartApiServer();
    await waitFor("a re-list", () => sink.eventsOf("llama", "relist").length > 0, 60_000);
    expect(sink.eventsOf("llama", "relist")[0].detail).toMatch(/410/);
    expect(sink.current("llama")).toEqual([at("r1", "10.5.0.1")]);

    // And the watch after the re-list follows changes again.
    await pods.create("r2", { app: "llama" }, { ip: "10.5.0.2", ready: true });
    await sink.until("llama", [at("r1", "10.5.0.1"), at("r2", "10.5.0.2")]);
  }, 90_000);

  it("refuses to start without credentials rather than guess a cluster", async () => {
    const saved = { KUBECONFIG: process.env.KUBECONFIG, KUBERNETES_SERVICE_HOST: process.env.KUBERNETES_SERVICE_HOST };
    delete process.env.KUBECONFIG;
    delete process.env.KUBERNETES_SERVICE_HOST;
    try {
      await expect(loadKubeConfig()).rejects.toThrow(/no Kubernetes credentials/);
      await expect(start(kubernetesSource(pool("llama", "x"), { log }), new RecordingSink())).rejects.toThrow(/no Kubernetes credentials/);
      // A kubeconfig file is taken as given.
      expect((await loadKubeConfig(server.writeKubeconfig())).getCurrentCluster()?.server).toBe(server.url);
    } finally {
      for (const [k, v] of Object.entries(saved)) if (v !== undefined) process.env[k] = v;
    }
  });
});
