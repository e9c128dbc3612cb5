// The aggregator link in the Kubernetes manifests: both Deployments mount
// the certificates from Secrets, read-only, at the paths the config names;
// the config asks for mutual TLS (no plaintext) with the aggregator
// Service's DNS name as the server name; and scripts/kube/make-certs.sh
// makes certificates that fit: the server certificate verifies against the
// CA for that name, and a real mutual TLS handshake with them succeeds while
// a client without a certificate is refused; applied to a real API server,
// it stores the Secrets the Deployments mount and leaves no key behind.
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { once } from "node:events";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import * as tls from "node:tls";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseAllDocuments } from "yaml";
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
const makeCerts = join(projectRoot, "scripts/kube/make-certs.sh");
const build = (dir: string) => execFileSync("kubectl", ["kustomize", dir], { encoding: "utf8" });
const objects = (stream: string) => parseAllDocuments(stream).map((d) => d.toJS() as Obj);
const deployment = (objs: Obj[], name: string) => objs.find((o) => o.kind === "Deployment" && o.metadata.name === name)!;

/** The Secret a container sees `file` from: its mount must be read-only and hold the file's folder. */
function secretFor(d: Obj, container: string, file: string): string {
  const pod = d.spec.template.spec;
  const c = pod.containers.find((x: any) => x.name === container);
  const mount = (c.volumeMounts ?? []).find((m: any) => m.mountPath === dirname(file));
  expect(mount, `${d.metadata.name}/${container} mounts ${dirname(file)} (for ${file})`).toBeDefined();
  expect(mount.readOnly, `${d.metadata.name}/${container} ${mount.mountPath} read-only`).toBe(true);
  expect(mount.subPath, "a subPath mount never sees a renewed Secret").toBeUndefined();
  const volume = pod.volumes.find((v: any) => v.name === mount.name);
  expect(volume.secret, `volume ${mount.name} is a Secret`).toBeDefined();
  return volume.secret.secretName;
}

const haveKubectl = commandRuns("kubectl", ["version", "--client"]);

describe.skipIf(!haveKubectl).each(Object.entries(dirs))("the aggregator link in %s", (_, dir) => {
  let objs: Obj[];
  let config: GatewayConfig;
  let namespace: string;
  beforeAll(() => {
    objs = objects(build(dir));
    const configMap = objs.find((o) => o.kind === "ConfigMap" && o.metadata.name === "llm-gateway-config")!;
    config = parseGatewayConfig(configMap.data["config.yaml"]);
    namespace = objs.find((o) => o.kind === "Namespace")!.metadata.name;
  });

  it("is mutual TLS, never plaintext, naming the aggregator Service's DNS name", () => {
    expect(config.aggregator.plaintext).toBe(false);
    expect(config.aggregator.tls).toBeDefined();
    expect(config.gateway.controlPlaneTls).toBeDefined();
    expect(config.gateway.controlPlaneTls!.serverName).toBe(`${config.aggregator.host}.${namespace}.svc`);
    expect(objs.some((o) => o.kind === "Service" && o.metadata.name === config.aggregator.host && o.metadata.namespace === namespace)).toBe(true);
  });

  it("mounts each side's certificate, key and CA from its Secret at the paths the config names", () => {
    const aggregator = deployment(objs, "llm-gateway-aggregator");
    const envoy = deployment(objs, "llm-gateway-envoy");
    const server = config.aggregator.tls!;
    const client = config.gateway.controlPlaneTls!;
    for (const f of [server.caFile, server.certFile, server.keyFile]) expect(secretFor(aggregator, "aggregator", f)).toBe("llm-gateway-aggregator-tls");
    for (const f of [client.caFile, client.certFile, client.keyFile]) expect(secretFor(envoy, "envoy", f)).toBe("llm-gateway-envoy-client-tls");
    for (const f of [config.gateway.tls!.certFile, config.gateway.tls!.keyFile]) expect(secretFor(envoy, "envoy", f)).toBe("llm-gateway-tls");
    // The keys the script stores (kubernetes.io/tls names, plus ca.crt).
    expect([server.certFile, server.keyFile, server.caFile].map((f) => f.split("/").pop())).toEqual(["tls.crt", "tls.key", "ca.crt"]);
    expect([client.certFile, client.keyFile, client.caFile].map((f) => f.split("/").pop())).toEqual(["tls.crt", "tls.key", "ca.crt"]);
  });

  it("renders Envoy's SDS files into the volume Envoy reads at the same path, naming the mounted files", () => {
    const envoy = deployment(objs, "llm-gateway-envoy");
    const pod = envoy.spec.template.spec;
    const [, , initDir] = pod.initContainers.find((c: any) => c.name === "envoy-init").command;
    const container = pod.containers.find((c: any) => c.name === "envoy");
    expect(container.volumeMounts.map((m: any) => m.mountPath)).toContain(initDir);
    const scratch = mkdtempSync(join(tmpdir(), "k8s-cp-tls-"));
    try {
      const configMap = objs.find((o) => o.kind === "ConfigMap")!;
      const configPath = join(scratch, "config.yaml");
      writeFileSync(configPath, configMap.data["config.yaml"]);
      execFileSync("sh", [join(projectRoot, "deploy/envoy-init.sh"), configPath, scratch], { env: { ...process.env, LLM_GATEWAY_HOME: projectRoot } });
      const bootstrap = readFileSync(join(scratch, "envoy.yaml"), "utf8");
      const client = JSON.parse(readFileSync(join(scratch, "llm_gateway_aggregator_client.sds.json"), "utf8"));
      // The bootstrap names the SDS file beside itself: in the pod, the volume both containers mount at initDir.
      expect(bootstrap).toContain(`${scratch}/llm_gateway_aggregator_client.sds.json`);
      expect(client.resources[0].tls_certificate.certificate_chain.filename).toBe(config.gateway.controlPlaneTls!.certFile);
    } finally {
      rmSync(scratch, { recursive: true, force: true });
    }
  });
});

describe.skipIf(!commandRuns("openssl", ["version"]))("scripts/kube/make-certs.sh --out", () => {
  const namespace = "llm-gateway";
  const serverName = `llm-gateway-aggregator.${namespace}.svc`;
  let out: string;
  const file = (name: string) => join(out, name);
  const verify = (...args: string[]) => spawnSync("openssl", ["verify", ...args], { encoding: "utf8" });

  beforeAll(() => {
    out = mkdtempSync(join(tmpdir(), "make-certs-"));
    execFileSync("sh", [makeCerts, "--namespace", namespace, "--listener", "--out", out], { encoding: "utf8" });
  });
  afterAll(() => {
    if (out) rmSync(out, { recursive: true, force: true });
  });

  it("signs the aggregator's server certificate for the Service's DNS name, and Envoy's for clients only", () => {
    const server = verify("-CAfile", file("control-plane-ca.crt"), "-purpose", "sslserver", "-verify_hostname", serverName, file("aggregator.crt"));
    expect(server.stdout + server.stderr).toContain(": OK");
    expect(server.status).toBe(0);
    expect(verify("-CAfile", file("control-plane-ca.crt"), "-purpose", "sslserver", "-verify_hostname", "llm-gateway-aggregator.other.svc", file("aggregator.crt")).status).not.toBe(0);
    expect(verify("-CAfile", file("control-plane-ca.crt"), "-purpose", "sslclient", file("envoy-client.crt")).status).toBe(0);
    expect(verify("-CAfile", file("control-plane-ca.crt"), "-purpose", "sslserver", file("envoy-client.crt")).status).not.toBe(0);
    // The listener's CA is another one: trusting the listener grants nothing on the control plane.
    expect(verify("-CAfile", file("edge-ca.crt"), "-verify_hostname", `llm-gateway.${namespace}.svc`, file("listener.crt")).status).toBe(0);
    expect(verify("-CAfile", file("control-plane-ca.crt"), file("listener.crt")).status).not.toBe(0);
  });

  it("gives certificates a real mutual TLS handshake accepts, and a client without one is refused", async () => {
    const server = tls.createServer({
      cert: readFileSync(file("aggregator.crt")),
      key: readFileSync(file("aggregator.key")),
      ca: readFileSync(file("control-plane-ca.crt")),
      requestCert: true,
      rejectUnauthorized: true,
    });
    server.on("secureConnection", (s) => s.end("ok"));
    server.on("tlsClientError", () => {});
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    const port = (server.address() as AddressInfo).port;
    const connect = (withCert: boolean) =>
      new Promise<string>((resolve) => {
        const s = tls.connect({
          host: "127.0.0.1",
          port,
          servername: serverName,
          ca: readFileSync(file("control-plane-ca.crt")),
          ...(withCert ? { cert: readFileSync(file("envoy-client.crt")), key: readFileSync(file("envoy-client.key")) } : {}),
        });
        let data = "";
        s.on("data", (d) => (data += d));
        s.on("end", () => resolve(data));
        s.on("error", (e) => resolve(`error: ${e.message}`));
      });
    try {
      expect(await connect(true)).toBe("ok");
      expect(await connect(false)).toMatch(/^error: .*certificate/);
    } finally {
      server.close();
    }
  });
});

describeWithApiServer(
  "scripts/kube/make-certs.sh against a real API server",
  () => {
    let kube: LocalApiServer;
    let kubeconfig: string;
    let cwd: string;
    const kubectl = (...args: string[]) => execFileSync("kubectl", ["--kubeconfig", kubeconfig, ...args], { encoding: "utf8" });

    beforeAll(async () => {
      kube = await startLocalApiServer();
      kubeconfig = kube.writeKubeconfig();
      cwd = mkdtempSync(join(tmpdir(), "make-certs-apply-"));
    }, 90_000);
    afterAll(async () => {
      // Awaited: the worker may exit as soon as afterAll returns, and an etcd not yet stopped would outlive it.
      await kube?.stop();
      if (cwd) rmSync(cwd, { recursive: true, force: true });
    });

    it("applies the three Secrets with the keys the config names, and keeps only the edge CA's certificate", () => {
      kubectl("create", "namespace", "certs");
      execFileSync("sh", [makeCerts, "--namespace", "certs", "--listener"], { cwd, env: { ...process.env, KUBECONFIG: kubeconfig }, encoding: "utf8" });
      const secret = (name: string) => JSON.parse(kubectl("-n", "certs", "get", "secret", name, "-o", "json"));
      for (const name of ["llm-gateway-aggregator-tls", "llm-gateway-envoy-client-tls"]) {
        expect(Object.keys(secret(name).data).sort(), name).toEqual(["ca.crt", "tls.crt", "tls.key"]);
      }
      expect(Object.keys(secret("llm-gateway-tls").data).sort()).toEqual(["tls.crt", "tls.key"]);
      // What the aggregator would be served from verifies for the name Envoy asks for in that namespace.
      const data = secret("llm-gateway-aggregator-tls").data;
      writeFileSync(join(cwd, "ca.pem"), Buffer.from(data["ca.crt"], "base64"));
      writeFileSync(join(cwd, "server.pem"), Buffer.from(data["tls.crt"], "base64"));
      const v = spawnSync("openssl", ["verify", "-CAfile", join(cwd, "ca.pem"), "-verify_hostname", "llm-gateway-aggregator.certs.svc", join(cwd, "server.pem")], { encoding: "utf8" });
      expect(v.status, v.stderr).toBe(0);
      expect(readdirSync(cwd).sort()).toEqual(["ca.pem", "llm-gateway-edge-ca.crt", "server.pem"]);
    }, 60_000);
  },
  { kubectl: true },
);
