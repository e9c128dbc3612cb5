// The Kubernetes-native parts of the manifests: a Namespace, so `kubectl
// apply -k` works on an empty cluster (applied for real against the 1.20 API
// server, everything but what it cannot serve); NetworkPolicies that admit
// only Envoy (and the other aggregator replica) to the aggregator's gRPC
// port and only labelled scrapers to the metrics ports; a policy/v1
// PodDisruptionBudget for Envoy (checked by structure: 1.20 has no
// policy/v1, as the test shows); the aggregator's rights on its config
// object, InferencePools and its Lease; two aggregator replicas electing a
// leader by a Lease in their namespace behind a headless Service; and the
// config-resource overlay, whose object holds the same config as the ConfigMap.
import { execFileSync, spawnSync } from "node:child_process";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseAllDocuments, stringify } from "yaml";
import { configFromSpec } from "../../host/aggregator/config-resource.js";
import { parseGatewayConfig, type GatewayConfig } from "../../host/config.js";
import { projectRoot } from "../../host/paths.js";
import { startLocalApiServer, type LocalApiServer } from "../../testing/localkube/apiserver.js";
import { describeWithApiServer } from "../helpers/k8s.js";
import { commandRuns } from "../helpers/requirements.js";

type Obj = { apiVersion: string; kind: string; metadata: { name: string; namespace?: string }; [k: string]: any };

const dirs = {
  base: join(projectRoot, "deploy/kubernetes/base"),
  example: join(projectRoot, "deploy/kubernetes/overlays/example"),
  configResource: join(projectRoot, "deploy/kubernetes/overlays/config-resource"),
};
const build = (dir: string) => execFileSync("kubectl", ["kustomize", dir], { encoding: "utf8" });
const objects = (stream: string) => parseAllDocuments(stream).map((d) => d.toJS() as Obj);
const of = (objs: Obj[], kind: string, name?: string) => {
  const found = objs.filter((o) => o.kind === kind && (name === undefined || o.metadata.name === name));
  expect(found, `${kind}/${name}`).toHaveLength(1);
  return found[0];
};
const beyond120 = (o: Obj) => o.apiVersion === "policy/v1";
const matches = (selector: Record<string, string>, labels: Record<string, string>) => Object.entries(selector).every(([k, v]) => labels[k] === v);
const configOf = (objs: Obj[]): GatewayConfig => parseGatewayConfig(of(objs, "ConfigMap", "llm-gateway-config").data["config.yaml"]);
const SCRAPER = { "llm-gateway.io/scraper": "true" };

describe.skipIf(!commandRuns("kubectl", ["version", "--client"])).each(Object.entries(dirs))("Kubernetes-native objects of %s", (_, dir) => {
  let objs: Obj[];
  let config: GatewayConfig;
  let envoyLabels: Record<string, string>;
  let aggregatorLabels: Record<string, string>;
  beforeAll(() => {
    objs = objects(build(dir));
    config = configOf(objs);
    envoyLabels = of(objs, "Deployment", "llm-gateway-envoy").spec.template.metadata.labels;
    aggregatorLabels = of(objs, "Deployment", "llm-gateway-aggregator").spec.template.metadata.labels;
  });

  it("has the Namespace its objects are in, first", () => {
    const ns = of(objs, "Namespace");
    expect(objs[0]).toBe(ns);
    const used = new Set(objs.filter((o) => o.metadata.namespace).map((o) => o.metadata.namespace));
    expect([...used]).toEqual([ns.metadata.name]);
  });

  it("admits only Envoy and the other aggregator replica to the aggregator's gRPC port, and only scrapers to its metrics port", () => {
    const policy = objs.find((o) => o.kind === "NetworkPolicy" && matches(o.spec.podSelector.matchLabels, aggregatorLabels))!;
    expect(policy.spec.policyTypes).toEqual(["Ingress"]);
    const grpc = policy.spec.ingress.filter((r: any) => r.ports.some((p: any) => p.port === config.aggregator.port));
    expect(grpc).toHaveLength(1);
    expect(grpc[0].ports).toEqual([{ protocol: "TCP", port: config.aggregator.port }]);
    expect(grpc[0].from).toEqual([
      { podSelector: { matchLabels: { "app.kubernetes.io/name": "llm-gateway", "app.kubernetes.io/component": "envoy" } } },
      { podSelector: { matchLabels: { "app.kubernetes.io/name": "llm-gateway", "app.kubernetes.io/component": "aggregator" } } },
    ]);
    expect(matches(grpc[0].from[0].podSelector.matchLabels, envoyLabels)).toBe(true);
    expect(matches(grpc[0].from[1].podSelector.matchLabels, aggregatorLabels)).toBe(true);
    const metrics = policy.spec.ingress.filter((r: any) => r.ports.some((p: any) => p.port === config.aggregator.metricsPort));
    expect(metrics).toHaveLength(1);
    expect(metrics[0].from).toEqual([{ namespaceSelector: {}, podSelector: { matchLabels: SCRAPER } }]);
    // Nothing else is admitted.
    expect(policy.spec.ingress).toHaveLength(2);
  });

  it("leaves Envoy's client port open and its stats port to scrapers only", () => {
    const policy = objs.find((o) => o.kind === "NetworkPolicy" && matches(o.spec.podSelector.matchLabels, envoyLabels))!;
    expect(policy.spec.ingress).toContainEqual({ ports: [{ protocol: "TCP", port: config.gateway.port }] });
    expect(config.gateway.statsPort).toBeDefined();
    expect(policy.spec.ingress).toContainEqual({ from: [{ namespaceSelector: {}, podSelector: { matchLabels: SCRAPER } }], ports: [{ protocol: "TCP", port: config.gateway.statsPort }] });
    expect(policy.spec.ingress).toHaveLength(2);
  });

  it("has a policy/v1 PodDisruptionBudget for Envoy that still lets a drain proceed", () => {
    const pdb = of(objs, "PodDisruptionBudget");
    expect(pdb.apiVersion).toBe("policy/v1");
    expect(matches(pdb.spec.selector.matchLabels, envoyLabels)).toBe(true);
    expect(pdb.spec.minAvailable).toBeUndefined();
    expect(pdb.spec.maxUnavailable).toBe(1);
    // Three Envoys, a fixed count (no autoscaler fights the budget): a drain leaves two serving.
    expect(of(objs, "Deployment", "llm-gateway-envoy").spec.replicas).toBe(3);
    expect(objs.filter((o) => o.kind === "HorizontalPodAutoscaler")).toEqual([]);
  });

  it("lets the aggregator read its config object and InferencePools, and write only the config's status and its Lease", () => {
    const role = of(objs, "Role", "llm-gateway-pod-reader");
    expect(role.rules).toContainEqual({ apiGroups: ["llm-gateway.io"], resources: ["inferencegatewayconfigs"], verbs: ["get", "list", "watch"] });
    expect(role.rules).toContainEqual({ apiGroups: ["llm-gateway.io"], resources: ["inferencegatewayconfigs/status"], verbs: ["update"] });
    expect(role.rules).toContainEqual({ apiGroups: ["inference.networking.k8s.io"], resources: ["inferencepools"], verbs: ["get", "list", "watch"] });
    const writes = role.rules.filter((r: any) => r.verbs.some((v: string) => !["get", "list", "watch"].includes(v)));
    expect(writes.flatMap((r: any) => r.resources)).toEqual(["inferencegatewayconfigs/status", "leases"]);
    expect(role.rules).toContainEqual({ apiGroups: ["coordination.k8s.io"], resources: ["leases"], verbs: ["get", "create", "update"] });
  });

  it("runs two aggregators that elect a leader by a Lease in their own namespace, behind a headless Service", () => {
    const aggregator = of(objs, "Deployment", "llm-gateway-aggregator");
    expect(aggregator.spec.replicas).toBe(2);
    expect(config.aggregator.leaderElection?.lease?.namespace).toBe(of(objs, "Namespace").metadata.name);
    const container = aggregator.spec.template.spec.containers[0];
    expect(container.command.slice(-2)).toEqual(["--advertise", `$(POD_IP):${config.aggregator.port}`]);
    expect(container.env).toContainEqual({ name: "POD_IP", valueFrom: { fieldRef: { fieldPath: "status.podIP" } } });
    // Envoy resolves every pod and health-checks them: a virtual IP would hide the leader.
    expect(of(objs, "Service", "llm-gateway-aggregator").spec.clusterIP).toBe("None");
  });
});

describe.skipIf(!commandRuns("kubectl", ["version", "--client"]))("the config-resource overlay", () => {
  it("runs the aggregator on the object in its own namespace, which holds the ConfigMap's config", () => {
    const objs = objects(build(dirs.configResource));
    const container = of(objs, "Deployment", "llm-gateway-aggregator").spec.template.spec.containers[0];
    expect(container.command.slice(-4, -2)).toEqual(["--config-resource", "$(POD_NAMESPACE)/llm-gateway"]);
    expect(container.env).toContainEqual({ name: "POD_NAMESPACE", valueFrom: { fieldRef: { fieldPath: "metadata.namespace" } } });
    const resource = of(objs, "InferenceGatewayConfig", "llm-gateway");
    expect(resource.apiVersion).toBe("llm-gateway.io/v1");
    expect(resource.metadata.namespace).toBe(of(objs, "Namespace").metadata.name);
    // Envoy's init step reads the ConfigMap, the aggregator the object: they must agree.
    const { apiVersion: _, ...fromMap } = configOf(objs);
    const { apiVersion: __, ...fromObject } = configFromSpec(resource.spec, "spec");
    expect(fromObject).toEqual(fromMap);
  });
});

describeWithApiServer(
  "kubectl apply -k on an empty 1.20 API server",
  () => {
    let kube: LocalApiServer;
    let kubeconfig: string;
    const kubectl = (args: string[], input?: string) => spawnSync("kubectl", ["--kubeconfig", kubeconfig, ...args], { input, encoding: "utf8" });
    const servable = (dir: string) => objects(build(dir)).filter((o) => !beyond120(o)).map((o) => stringify(o)).join("---\n");

    beforeAll(async () => {
      kube = await startLocalApiServer();
      kubeconfig = kube.writeKubeconfig();
    }, 90_000);
    afterAll(() => kube?.stop());

    it("creates every object of the base (the Namespace first), then the config-resource overlay's object", () => {
      const base = kubectl(["apply", "-f", "-"], servable(dirs.base));
      expect(base.stderr).toBe("");
      expect(base.status).toBe(0);
      expect(base.stdout).toContain("namespace/llm-gateway created");
      expect(base.stdout).toContain("customresourcedefinition.apiextensions.k8s.io/inferencegatewayconfigs.llm-gateway.io created");
      expect(base.stdout).toContain("networkpolicy.networking.k8s.io/llm-gateway-aggregator created");
      expect(kubectl(["wait", "--for=condition=Established", "--timeout=30s", "crd/inferencegatewayconfigs.llm-gateway.io"]).status).toBe(0);
      const overlay = kubectl(["apply", "-f", "-"], servable(dirs.configResource));
      expect(overlay.stderr).toBe("");
      expect(overlay.stdout).toContain("inferencegatewayconfig.llm-gateway.io/llm-gateway created");
      expect(overlay.stdout).toContain("deployment.apps/llm-gateway-aggregator configured");
    });

    it("cannot serve policy/v1, which is why the PodDisruptionBudget is checked by structure", () => {
      const pdb = objects(build(dirs.base)).filter(beyond120);
      expect(pdb.map((o) => o.kind)).toEqual(["PodDisruptionBudget"]);
      const r = kubectl(["apply", "-f", "-"], stringify(pdb[0]));
      expect(r.status).not.toBe(0);
      expect(r.stderr).toContain('no matches for kind "PodDisruptionBudget" in version "policy/v1"');
    });
  },
  { kubectl: true },
);
