// The Kubernetes manifests (deploy/kubernetes): the kustomize base and the
// example overlay build with kubectl's kustomize, a real kube-apiserver
// accepts what they build (`kubectl apply --dry-run=server`), and the parts
// fit together: probes and resources everywhere, Envoy's bootstrap (rendered
// by the real init step from the ConfigMap's config) dials the aggregator's
// Service, the config parses, and the aggregator may read every pool's pods.
import { CoreV1Api } from "@kubernetes/client-node";
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse as parseYaml, parseAllDocuments, stringify } from "yaml";
import { parseGatewayConfig, type GatewayConfig } from "../../host/config.js";
import { apiServerBinaries, startLocalApiServer, type LocalApiServer } from "../../testing/localkube/apiserver.js";
import { projectRoot } from "../../host/paths.js";
import { skipWithout } from "../helpers/requirements.js";

const kustomizations = {
  base: join(projectRoot, "deploy/kubernetes/base"),
  example: join(projectRoot, "deploy/kubernetes/overlays/example"),
};
const version = JSON.parse(readFileSync(join(projectRoot, "package.json"), "utf8")).version as string;

type Obj = { apiVersion: string; kind: string; metadata: { name: string; namespace?: string }; [k: string]: any };

/** `kubectl kustomize DIR`: the YAML stream an apply would send. */
function build(dir: string): string {
  return execFileSync("kubectl", ["kustomize", dir], { encoding: "utf8" });
}

function objects(stream: string): Obj[] {
  return parseAllDocuments(stream).map((d) => d.toJS() as Obj);
}

/** Kinds without a namespace. */
const CLUSTER_SCOPED = new Set(["Namespace", "CustomResourceDefinition"]);

/**
 * Left out of the dry run: a version the 1.20 API server cannot serve
 * (policy/v1 came in 1.21: checked by structure), and the Namespace the
 * dry run's objects need to exist already (k8s-manifests-native.test.ts
 * applies it for real).
 */
const notInDryRun = (o: Obj) => (o.apiVersion === "policy/v1" && o.kind === "PodDisruptionBudget") || o.kind === "Namespace";

function one(objs: Obj[], kind: string, name: string): Obj {
  const found = objs.filter((o) => o.kind === kind && o.metadata.name === name);
  expect(found, `${kind}/${name}`).toHaveLength(1);
  return found[0];
}

/** The number a container port reference (name or number) stands for. */
function containerPort(container: any, ref: string | number): number {
  if (typeof ref === "number") return ref;
  const port = (container.ports ?? []).find((p: any) => p.name === ref);
  expect(port, `port ${ref} of container ${container.name}`).toBeDefined();
  return port.containerPort;
}

/** The Service port a client dials for `name`, and the container port it forwards to. */
function servicePort(service: Obj, name: string): { port: number; targetPort: string | number } {
  const port = service.spec.ports.find((p: any) => p.name === name);
  expect(port, `port ${name} of Service ${service.metadata.name}`).toBeDefined();
  return port;
}

const haveKubectl = !skipWithout(
  spawnSync("kubectl", ["version", "--client"], { stdio: "ignore" }).status === 0,
  "k8s-manifests.test",
  "kubectl is not installed (Debian: apt-get install kubernetes-client)",
);

interface Manifests {
  objs: Obj[];
  deployments: Obj[];
  aggregator: Obj;
  envoy: Obj;
  configMap: Obj;
  config: GatewayConfig;
}

/** A kustomization's output and the objects the checks look at (fails on a missing one or a config that does not parse). */
function load(which: string, dir: string): Manifests {
  const objs = objects(build(dir));
  const configMap = one(objs, "ConfigMap", "llm-gateway-config");
  return {
    objs,
    deployments: objs.filter((o) => o.kind === "Deployment"),
    aggregator: one(objs, "Deployment", "llm-gateway-aggregator"),
    envoy: one(objs, "Deployment", "llm-gateway-envoy"),
    configMap,
    config: parseGatewayConfig(configMap.data["config.yaml"], `${which}: ConfigMap llm-gateway-config`),
  };
}

describe.skipIf(!haveKubectl).each(Object.entries(kustomizations))("kustomization %s", (which, dir) => {
  let m: Manifests;
  beforeAll(() => {
    m = load(which, dir);
  });

  it("puts every object in one namespace", () => {
    const { objs } = m;
    const namespaces = new Set(objs.filter((o) => !CLUSTER_SCOPED.has(o.kind)).map((o) => o.metadata.namespace));
    expect([...namespaces]).toHaveLength(1);
    expect([...namespaces][0]).toMatch(/^[a-z0-9-]+$/);
  });

  it("gives every container probes on its own ports, resources, and a non-root read-only file system", () => {
    const { deployments } = m;
    for (const d of deployments) {
      const pod = d.spec.template.spec;
      for (const c of [...(pod.initContainers ?? []), ...pod.containers]) {
        const where = `${d.metadata.name}/${c.name}`;
        expect(c.resources?.requests?.cpu, `${where} cpu request`).toBeDefined();
        expect(c.resources?.requests?.memory, `${where} memory request`).toBeDefined();
        expect(c.resources?.limits?.memory, `${where} memory limit`).toBeDefined();
        expect(c.securityContext?.readOnlyRootFilesystem, `${where} read-only root`).toBe(true);
        expect(c.securityContext?.allowPrivilegeEscalation, `${where} privilege escalation`).toBe(false);
        expect(c.securityContext?.capabilities?.drop, `${where} capabilities`).toEqual(["ALL"]);
        expect(pod.securityContext?.runAsNonRoot ?? c.securityContext?.runAsNonRoot, `${where} non-root`).toBe(true);
        expect(c.securityContext?.runAsUser ?? pod.securityContext?.runAsUser, `${where} uid`).toBeGreaterThan(0);
      }
      for (const c of pod.containers) {
        const where = `${d.metadata.name}/${c.name}`;
        for (const probe of ["readinessProbe", "livenessProbe"]) {
          const p = c[probe];
          expect(p, `${where} ${probe}`).toBeDefined();
          const target = p.httpGet ?? p.tcpSocket;
          expect(target, `${where} ${probe}: an HTTP or TCP check`).toBeDefined();
          containerPort(c, target.port);
        }
      }
    }
  });

  it("runs the project image at the package version, and the official Envoy", () => {
    const { deployments } = m;
    const images = deployments.flatMap((d) => [...(d.spec.template.spec.initContainers ?? []), ...d.spec.template.spec.containers]).map((c) => c.image);
    const gatewayImages = images.filter((i) => !i.startsWith("envoyproxy/"));
    expect(gatewayImages.length).toBe(2);
    for (const image of gatewayImages) expect(image).toMatch(new RegExp(`(^|/)llm-gateway:${version.replace(/\./g, "\\.")}$`));
    expect(images).toContain("envoyproxy/envoy:v1.40.0");
  });

  it("mounts the config folder (no subPath, so edits reach the pods) from the generated ConfigMap", () => {
    const { aggregator, envoy, configMap } = m;
    for (const d of [aggregator, envoy]) {
      const pod = d.spec.template.spec;
      const volume = pod.volumes.find((v: any) => v.configMap);
      expect(volume.configMap.name).toBe(configMap.metadata.name);
      for (const c of [...(pod.initContainers ?? []), ...pod.containers]) {
        for (const m of (c.volumeMounts ?? []).filter((m: any) => m.name === volume.name)) {
          expect(m.subPath, `${d.metadata.name}/${c.name}`).toBeUndefined();
          expect(m.readOnly).toBe(true);
        }
      }
    }
  });

  it("has Kubernetes-discovered pools, each in a namespace where the aggregator's ServiceAccount may read pods", () => {
    const { objs, aggregator, config } = m;
    const sa = aggregator.spec.template.spec.serviceAccountName;
    const saNamespace = aggregator.metadata.namespace;
    one(objs, "ServiceAccount", sa);
    expect(config.pools.length).toBeGreaterThan(0);
    for (const pool of config.pools) {
      const ns = pool.kubernetes?.namespace;
      expect(ns, `pool ${pool.name} is discovered by label`).toBeDefined();
      const bindings = objs.filter(
        (o) =>
          o.kind === "RoleBinding" &&
          o.metadata.namespace === ns &&
          o.subjects.some((s: any) => s.kind === "ServiceAccount" && s.name === sa && s.namespace === saNamespace),
      );
      const roles = bindings.map((b) => objs.find((o) => o.kind === b.roleRef.kind && o.metadata.name === b.roleRef.name && o.metadata.namespace === ns));
      const readsPods = roles.some((r) =>
        r?.rules.some((rule: any) => rule.apiGroups.includes("") && rule.resources.includes("pods") && ["get", "list", "watch"].every((v) => rule.verbs.includes(v))),
      );
      expect(readsPods, `pool ${pool.name}: a Role in ${ns} letting ${saNamespace}/${sa} get, list and watch pods`).toBe(true);
    }
  });

  it("has the aggregator listen where its Service sends: the config's host is the Service, mapped to every interface in its own pod", () => {
    const { objs, aggregator, config } = m;
    const service = one(objs, "Service", config.aggregator.host);
    const pod = aggregator.spec.template.spec;
    expect(service.spec.selector).toEqual(aggregator.spec.template.metadata.labels);
    expect(pod.hostAliases).toContainEqual({ ip: "0.0.0.0", hostnames: [config.aggregator.host] });
    const container = pod.containers[0];
    expect(containerPort(container, servicePort(service, "grpc").targetPort)).toBe(config.aggregator.port);
    expect(containerPort(container, servicePort(service, "metrics").targetPort)).toBe(config.aggregator.metricsPort);
  });

  describe("Envoy", () => {
    // Made in a hook: the describe body runs even when kubectl is missing and the suite is skipped.
    let scratch: string;
    beforeAll(() => {
      scratch = mkdtempSync(join(tmpdir(), "k8s-envoy-init-"));
    });
    afterAll(() => {
      if (scratch) rmSync(scratch, { recursive: true, force: true });
    });

    function parts() {
      const pod = m.envoy.spec.template.spec;
      return {
        pod,
        init: pod.initContainers.find((c: any) => c.name === "envoy-init"),
        container: pod.containers.find((c: any) => c.name === "envoy"),
      };
    }

    /** The init step for real (from this checkout, not the image) on the ConfigMap's config. */
    function runInitStep(): any {
      const [, configPath] = parts().init.command;
      writeFileSync(join(scratch, "config.yaml"), m.configMap.data[configPath.split("/").pop()]);
      const out = join(scratch, "out");
      execFileSync("mkdir", ["-p", out]);
      execFileSync("sh", [join(projectRoot, "deploy/envoy-init.sh"), join(scratch, "config.yaml"), out], {
        env: { ...process.env, LLM_GATEWAY_HOME: projectRoot },
      });
      return parseYaml(readFileSync(join(out, "envoy.yaml"), "utf8"));
    }

    it("reads the bootstrap and the filter from the volume the init step fills, at the same path", () => {
      const { pod, init, container } = parts();
      expect(init.command[0]).toBe("llm-gateway-envoy-init");
      const [, configPath, dir] = init.command;
      const configMount = init.volumeMounts.find((m: any) => configPath.startsWith(`${m.mountPath}/`));
      expect(pod.volumes.find((v: any) => v.name === configMount.name).configMap).toBeDefined();
      const initMount = init.volumeMounts.find((m: any) => m.mountPath === dir);
      const envoyMount = container.volumeMounts.find((m: any) => m.name === initMount.name);
      expect(pod.volumes.find((v: any) => v.name === initMount.name).emptyDir).toBeDefined();
      expect(envoyMount.mountPath).toBe(dir);
      expect(container.args[container.args.indexOf("-c") + 1]).toBe(`${dir}/envoy.yaml`);
    });

    it("dials the aggregator's Service for ADS and snapshots, and listens where its Service sends", () => {
      const { objs, aggregator, envoy } = m;
      const { container } = parts();
      const bootstrap = runInitStep();
      const adsCluster = bootstrap.dynamic_resources.ads_config.grpc_services[0].envoy_grpc.cluster_name;
      const cluster = bootstrap.static_resources.clusters.find((c: any) => c.name === adsCluster);
      const address = cluster.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address;
      const aggregatorService = one(objs, "Service", address.address);
      expect(aggregatorService.spec.selector).toEqual(aggregator.spec.template.metadata.labels);
      expect(servicePort(aggregatorService, "grpc").port).toBe(address.port_value);
      // The Wasm link streams snapshots over the same cluster.
      const link = bootstrap.bootstrap_extensions.find((e: any) => e.name === "envoy.bootstrap.wasm");
      expect(JSON.parse(link.typed_config.config.configuration.value).aggregator_cluster).toBe(adsCluster);

      const listener = bootstrap.static_resources.listeners[0].address.socket_address;
      expect(listener.address).toBe("0.0.0.0");
      const gateway = objs.find((o) => o.kind === "Service" && o.spec.selector["app.kubernetes.io/component"] === "envoy")!;
      expect(gateway.spec.selector).toEqual(envoy.spec.template.metadata.labels);
      expect(containerPort(container, servicePort(gateway, "http").targetPort)).toBe(listener.port_value);
      expect(container.readinessProbe.httpGet.path).toBe("/health");
    });
  });
});

/**
 * The API server may refuse an apply for reasons a client-side build cannot
 * see (field validation against its schemas, selector/label agreement,
 * names, references); a dry run stores nothing.
 */
function dryRun(kubeconfig: string, stream: string): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync("kubectl", ["--kubeconfig", kubeconfig, "apply", "--dry-run=server", "-f", "-"], { input: stream, encoding: "utf8" });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

const haveApiServer = !skipWithout(
  apiServerBinaries() !== null,
  "k8s-manifests.test (the dry run)",
  "kube-apiserver is not built (scripts/kube/build-apiserver.sh, about 10 minutes cold)",
);

describe.skipIf(!haveKubectl || !haveApiServer)("kubectl apply --dry-run=server against a real kube-apiserver", () => {
  let server: LocalApiServer;
  let kubeconfig: string;

  beforeAll(async () => {
    server = await startLocalApiServer();
    kubeconfig = server.writeKubeconfig();
    const core = server.kubeConfig().makeApiClient(CoreV1Api);
    const namespaces = new Set(Object.values(kustomizations).flatMap((dir) => objects(build(dir)).flatMap((o) => (o.metadata.namespace ? [o.metadata.namespace] : []))));
    for (const name of namespaces) await core.createNamespace({ body: { metadata: { name } } });
  }, 120_000);
  afterAll(() => server?.stop());

  it.each(Object.entries(kustomizations))("accepts every object of %s (that it can serve)", (_, dir) => {
    const stream = objects(build(dir))
      .filter((o) => !notInDryRun(o))
      .map((o) => stringify(o))
      .join("---\n");
    const r = dryRun(kubeconfig, stream);
    expect(r.stderr).toBe("");
    expect(r.status).toBe(0);
    const accepted = r.stdout.trim().split("\n");
    expect(accepted).toHaveLength(objects(stream).length);
    for (const line of accepted) expect(line).toMatch(/ (created|configured|unchanged) \(server dry run\)$/);
  }, 60_000);

  it("refuses a broken copy (a Deployment whose selector does not match its pods), so acceptance means something", () => {
    const objs = objects(build(kustomizations.base));
    const envoy = one(objs, "Deployment", "llm-gateway-envoy");
    envoy.spec.template.metadata.labels["app.kubernetes.io/component"] = "not-envoy";
    const r = dryRun(kubeconfig, objs.map((o) => stringify(o)).join("---\n"));
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(/selector.*does not match template.*labels/);
  }, 60_000);
});
