// deploy/kubernetes/base/rbac.yaml against a real kube-apiserver with RBAC on:
// applied as the kustomize base applies it (`namespace:` set by the
// kustomization), then the aggregator's ServiceAccount token may read and
// watch the Pods of its namespace, and run discovery, and nothing more.
import { CoreV1Api, RbacAuthorizationV1Api, Watch } from "@kubernetes/client-node";
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, expect, it } from "vitest";
import { kubernetesSource } from "../../host/discovery/kubernetes.js";
import { startLocalApiServer, type LocalApiServer } from "../../testing/localkube/apiserver.js";
import { describeWithApiServer, RecordingSink, TestPods } from "../helpers/k8s.js";
import { waitFor } from "../helpers/stack.js";

const RBAC_YAML = fileURLToPath(new URL("../../deploy/kubernetes/base/rbac.yaml", import.meta.url));
const NS = "gateway";
const OTHER = "elsewhere";
const SERVICE_ACCOUNT = `system:serviceaccount:${NS}:llm-gateway-aggregator`;

/** The HTTP status a call fails with (the test fails if it succeeds). */
async function statusOf(call: Promise<unknown>): Promise<number> {
  try {
    await call;
  } catch (err) {
    return (err as { code: number }).code;
  }
  throw new Error("expected the call to be refused");
}

/** Opens a watch and resolves with the HTTP status it is refused with, or 200 once it streams. */
function watchStatus(watch: Watch, path: string): Promise<number> {
  return new Promise((resolve) => {
    let refused: number | null = null;
    void watch
      .watch(path, {}, () => {}, (err) => {
        refused = (err as { statusCode?: number } | null)?.statusCode ?? -1;
        resolve(refused);
      })
      .then((controller) => {
        if (refused === null) {
          resolve(200);
          controller.abort();
        }
      });
  });
}

describeWithApiServer("the aggregator's RBAC (deploy/kubernetes/base/rbac.yaml) on a real API server", () => {
  let server: LocalApiServer;
  let workDir: string;
  let pods: TestPods;

  beforeAll(async () => {
    server = await startLocalApiServer({ users: [{ name: SERVICE_ACCOUNT }] });
    pods = new TestPods(server.kubeConfig(), NS);
    await pods.createNamespace();
    await new TestPods(server.kubeConfig(), OTHER).createNamespace();
    // The base's kustomization names the namespace; render and apply the file the same way.
    workDir = mkdtempSync(join(tmpdir(), "rbac-"));
    copyFileSync(RBAC_YAML, join(workDir, "rbac.yaml"));
    writeFileSync(join(workDir, "kustomization.yaml"), `namespace: ${NS}\nresources: [rbac.yaml]\n`);
    const out = execFileSync("kubectl", ["apply", "-k", workDir, "--kubeconfig", server.writeKubeconfig()], { encoding: "utf8", timeout: 60_000 });
    expect(out.trim().split("\n").sort()).toEqual([
      "role.rbac.authorization.k8s.io/llm-gateway-pod-reader created",
      "rolebinding.rbac.authorization.k8s.io/llm-gateway-aggregator-pods created",
      "serviceaccount/llm-gateway-aggregator created",
    ]);
  }, 120_000);
  afterAll(async () => {
    await server?.stop();
    if (workDir) rmSync(workDir, { recursive: true, force: true });
  });

  it("grants get, list and watch on pods (and its config object and InferencePools), and get, create and update on Leases, in its namespace, bound to the aggregator's ServiceAccount", async () => {
    const rbac = server.kubeConfig().makeApiClient(RbacAuthorizationV1Api);
    const role = await rbac.readNamespacedRole({ name: "llm-gateway-pod-reader", namespace: NS });
    expect(role.rules).toEqual([
      { apiGroups: [""], resources: ["pods"], verbs: ["get", "list", "watch"] },
      { apiGroups: ["inference.networking.k8s.io"], resources: ["inferencepools"], verbs: ["get", "list", "watch"] },
      { apiGroups: ["llm-gateway.io"], resources: ["inferencegatewayconfigs"], verbs: ["get", "list", "watch"] },
      { apiGroups: ["llm-gateway.io"], resources: ["inferencegatewayconfigs/status"], verbs: ["update"] },
      { apiGroups: ["coordination.k8s.io"], resources: ["leases"], verbs: ["get", "create", "update"] },
    ]);
    const binding = await rbac.readNamespacedRoleBinding({ name: "llm-gateway-aggregator-pods", namespace: NS });
    expect(binding.subjects).toEqual([{ kind: "ServiceAccount", name: "llm-gateway-aggregator", namespace: NS }]);
  });

  it("lets the ServiceAccount list, get and watch its namespace's pods, and run discovery", async () => {
    await pods.create("m1", { app: "llama" }, { ip: "10.9.0.1", ready: true });
    const asAggregator = server.kubeConfig(SERVICE_ACCOUNT);
    const api = asAggregator.makeApiClient(CoreV1Api);
    const list = await api.listNamespacedPod({ namespace: NS, labelSelector: "app=llama" });
    expect(list.items.map((p) => p.metadata?.name)).toEqual(["m1"]);
    expect((await api.readNamespacedPod({ name: "m1", namespace: NS })).status?.podIP).toBe("10.9.0.1");
    expect(await watchStatus(new Watch(asAggregator), `/api/v1/namespaces/${NS}/pods`)).toBe(200);

    const sink = new RecordingSink();
    const source = kubernetesSource({ name: "llama", kubernetes: { namespace: NS, selector: "app=llama", port: 8000 } }, { kubeConfig: asAggregator, log: () => {} });
    try {
      await source.start(sink);
      expect(sink.current("llama")).toEqual(["m1 10.9.0.1:8000"]);
      await pods.create("m2", { app: "llama" }, { ip: "10.9.0.2", ready: true });
      await sink.until("llama", ["m1 10.9.0.1:8000", "m2 10.9.0.2:8000"]);
      expect(sink.eventsOf("llama", "error")).toEqual([]);
    } finally {
      source.close();
    }
  });

  it("refuses the ServiceAccount everything else: other namespaces, secrets, configmaps, writes, nodes", async () => {
    const asAggregator = server.kubeConfig(SERVICE_ACCOUNT);
    const api = asAggregator.makeApiClient(CoreV1Api);
    const pod = { metadata: { name: "intruder" }, spec: { containers: [{ name: "c", image: "i" }] } };
    await pods.create("victim", { app: "llama" });
    const refused = {
      "list pods in another namespace": await statusOf(api.listNamespacedPod({ namespace: OTHER })),
      "watch pods in another namespace": await watchStatus(new Watch(asAggregator), `/api/v1/namespaces/${OTHER}/pods`),
      "list pods in all namespaces": await statusOf(api.listPodForAllNamespaces()),
      "list secrets": await statusOf(api.listNamespacedSecret({ namespace: NS })),
      "list configmaps": await statusOf(api.listNamespacedConfigMap({ namespace: NS })),
      "create a pod": await statusOf(api.createNamespacedPod({ namespace: NS, body: pod })),
      "delete a pod": await statusOf(api.deleteNamespacedPod({ name: "victim", namespace: NS })),
      "write a pod's status": await statusOf(api.replaceNamespacedPodStatus({ name: "victim", namespace: NS, body: await pods.api.readNamespacedPod({ name: "victim", namespace: NS }) })),
      "list nodes": await statusOf(api.listNode()),
    };
    expect(refused).toEqual(Object.fromEntries(Object.keys(refused).map((k) => [k, 403])));

    // A pool in a namespace the ServiceAccount has no Role in: reported empty, with the 403 as an error event.
    const sink = new RecordingSink();
    const source = kubernetesSource({ name: "stray", kubernetes: { namespace: OTHER, selector: "app=llama", port: 8000 } }, { kubeConfig: asAggregator, log: () => {} });
    try {
      await source.start(sink);
      expect(sink.current("stray")).toEqual([]);
      await waitFor("an error event", () => sink.eventsOf("stray", "error").length > 0);
      expect(sink.eventsOf("stray", "error")[0].detail).toMatch(/^HTTP 403: pods is forbidden: User "system:serviceaccount:gateway:llm-gateway-aggregator" cannot list resource "pods"/);
    } finally {
      source.close();
    }
  });
}, { kubectl: true }); // the base is applied with `kubectl apply -k`
