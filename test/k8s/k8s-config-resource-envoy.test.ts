// The config object drives a real Envoy: an aggregator following an
// InferenceGatewayConfig (real API server) adds a pool when the object gains
// one, and Envoy (the openai client through it) routes to the new pool's pod
// without a restart; a refused edit leaves routing as it was.
import { CustomObjectsApi } from "@kubernetes/client-node";
import { execFileSync } from "node:child_process";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, expect, it } from "vitest";
import { ConfigResource } from "../../host/aggregator/config-resource.js";
import { projectRoot } from "../../host/paths.js";
import { CONFIG_GROUP, CONFIG_PLURAL, CONFIG_VERSION } from "../../host/kubernetes/crd.js";
import { startFleet, type Fleet } from "../../testing/fakeserver/index.js";
import { startStack, type Stack } from "../../testing/launcher/stack.js";
import { startLocalApiServer, type LocalApiServer } from "../../testing/localkube/apiserver.js";
import { connect, type Conn } from "../helpers/connections.js";
import { describeWithApiServer } from "../helpers/k8s.js";
import { waitFor } from "../helpers/stack.js";

const NAMESPACE = "gateway";
const NAME = "llm-gateway";
const LLAMA = "llama-3.1-8b";
const QWEN = "qwen3-32b";

describeWithApiServer(
  "InferenceGatewayConfig driving a real Envoy",
  () => {
    let kube: LocalApiServer;
    let api: CustomObjectsApi;
    let fleet: Fleet;
    let stack: Stack;
    let resource: ConfigResource;
    const conns: Conn[] = [];
    const ref = { group: CONFIG_GROUP, version: CONFIG_VERSION, plural: CONFIG_PLURAL, namespace: NAMESPACE, name: NAME };
    const endpoint = (pod: string) => `127.0.0.1:${fleet.pods.find((p) => p.name === pod)!.port}`;
    const spec = (pools: Array<[string, string, string]>) => ({
      gateway: { host: "127.0.0.1", port: 0, adminPort: 0 },
      aggregator: { host: "127.0.0.1", port: 0, metricsPort: 0 },
      profiles: { latency: { admission: { enabled: false } } },
      pools: pools.map(([name, model, pod]) => ({ name, baseModel: model, endpoints: [endpoint(pod)] })),
    });
    const edit = async (s: object) => {
      const obj = (await api.getNamespacedCustomObject(ref)) as any;
      const next = await api.replaceNamespacedCustomObject({ ...ref, body: { ...obj, spec: s } });
      return (next as any).metadata.generation as number;
    };
    const accepted = async (generation: number) => {
      let cond: any;
      await waitFor(`the verdict on generation ${generation}`, async () => {
        const o = (await api.getNamespacedCustomObject(ref)) as any;
        cond = o.status?.conditions?.find((c: any) => c.type === "Accepted");
        return cond?.observedGeneration === generation;
      }, 20_000);
      return cond;
    };
    const servedBy = async (model: string) => {
      const { response } = await conns[0].client.chat.completions.create({ model, messages: [{ role: "user", content: "hello" }], max_tokens: 4 }).withResponse();
      return response.headers.get("x-served-by");
    };

    beforeAll(async () => {
      kube = await startLocalApiServer();
      const kubeconfig = kube.writeKubeconfig();
      execFileSync("kubectl", ["--kubeconfig", kubeconfig, "apply", "-f", join(projectRoot, "deploy/kubernetes/base/crd.yaml")]);
      execFileSync("kubectl", ["--kubeconfig", kubeconfig, "wait", "--for=condition=Established", "--timeout=30s", "crd/inferencegatewayconfigs.llm-gateway.io"]);
      execFileSync("kubectl", ["--kubeconfig", kubeconfig, "create", "namespace", NAMESPACE]);
      fleet = await startFleet([
        { name: "a", model: LLAMA, port: 0 },
        { name: "b", model: QWEN, port: 0 },
      ]);
      api = kube.kubeConfig().makeApiClient(CustomObjectsApi);
      await api.createNamespacedCustomObject({ ...ref, body: { apiVersion: `${CONFIG_GROUP}/${CONFIG_VERSION}`, kind: "InferenceGatewayConfig", metadata: { name: NAME }, spec: spec([["llama", LLAMA, "a"]]) } });
      resource = await ConfigResource.open({ kubeConfig: kube.kubeConfig(), ref: { namespace: NAMESPACE, name: NAME }, log: () => {} });
      stack = await startStack(await resource.initial(), { metricsPort: false, concurrency: 2, log: () => {} });
      resource.follow((next) => stack.aggregator.reload(next), (reason) => stack.aggregator.refuseReload(reason));
      await connect(stack, 1, "x", conns);
      await waitFor("llama served by pod a", async () => (await servedBy(LLAMA).catch(() => null)) === "a", 20_000);
    }, 120_000);

    afterAll(async () => {
      resource?.close();
      for (const c of conns.splice(0)) c.agent.destroy();
      await stack?.close();
      await fleet?.close();
      await kube?.stop();
    }, 60_000);

    it("routes to a pool the object gains, on the same Envoy", async () => {
      const pid = stack.envoy.pid;
      const generation = await edit(spec([["llama", LLAMA, "a"], ["qwen", QWEN, "b"]]));
      expect(await accepted(generation)).toMatchObject({ status: "True", reason: "Applied", message: "applied: pool qwen added" });
      // Applied means in force: the filter has it with the next snapshot.
      await waitFor("qwen served by pod b", async () => (await servedBy(QWEN).catch(() => null)) === "b");
      expect(stack.envoy.pid).toBe(pid);
    });

    it("keeps routing as it was on a refused edit", async () => {
      const generation = await edit(spec([["llama", LLAMA, "a"], ["qwen", LLAMA, "b"]]));
      expect(await accepted(generation)).toMatchObject({ status: "False", reason: "Invalid" });
      expect(await servedBy(QWEN)).toBe("b");
      expect(await servedBy(LLAMA)).toBe("a");
    });
  },
  { kubectl: true },
);
