// Pools from a Gateway API Inference Extension InferencePool, against a real
// kube-apiserver with an InferencePool CRD installed: the pods its selector
// matches become the pool's endpoints on its target port, and a change of
// the selector or the port, or the object's deletion, is followed.
import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { inferencePoolSource } from "../../host/discovery/inference-pool.js";
import { projectRoot } from "../../host/paths.js";
import { startLocalApiServer, type LocalApiServer } from "../../testing/localkube/apiserver.js";
import { describeWithApiServer, RecordingSink, TestPods } from "../helpers/k8s.js";

const NAMESPACE = "models";

describeWithApiServer(
  "InferencePool discovery against a real API server",
  () => {
    let server: LocalApiServer;
    let kubeconfig: string;
    let pods: TestPods;
    const logs: string[] = [];
    let close = () => {};

    const applyPool = (matchLabels: Record<string, string>, port: number) =>
      execFileSync("kubectl", ["--kubeconfig", kubeconfig, "apply", "-f", "-"], {
        input: JSON.stringify({
          apiVersion: "inference.networking.k8s.io/v1",
          kind: "InferencePool",
          metadata: { name: "llama", namespace: NAMESPACE },
          spec: { selector: { matchLabels }, targetPorts: [{ number: port }], endpointPickerRef: { name: "unused-epp", port: { number: 9002 } } },
        }),
      });

    beforeAll(async () => {
      server = await startLocalApiServer();
      kubeconfig = server.writeKubeconfig();
      execFileSync("kubectl", ["--kubeconfig", kubeconfig, "apply", "-f", join(projectRoot, "testing/localkube/inferencepool-crd.yaml")]);
      execFileSync("kubectl", ["--kubeconfig", kubeconfig, "wait", "--for=condition=Established", "--timeout=30s", "crd/inferencepools.inference.networking.k8s.io"]);
      pods = new TestPods(server.kubeConfig(), NAMESPACE);
      await pods.createNamespace();
      await pods.create("a", { app: "llama" }, { ip: "10.0.0.1", ready: true });
      await pods.create("b", { app: "llama", track: "next" }, { ip: "10.0.0.2", ready: true });
      await pods.create("c", { app: "qwen" }, { ip: "10.0.0.3", ready: true });
    }, 90_000);

    afterAll(async () => {
      close();
      await server?.stop();
    });

    it("follows the InferencePool's selector and target port, and its deletion", async () => {
      const sink = new RecordingSink();
      // Started before the object exists: no pods, said as an error event.
      const source = inferencePoolSource({ name: "llama", inferencePool: { namespace: NAMESPACE, name: "llama" } }, { kubeConfig: server.kubeConfig(), log: (l) => logs.push(l) });
      close = () => source.close();
      await source.start(sink);
      expect(sink.current("llama")).toEqual([]);
      expect(sink.eventsOf("llama", "error").map((e) => e.detail)).toContain("the InferencePool does not exist");

      applyPool({ app: "llama" }, 8000);
      await sink.until("llama", ["a 10.0.0.1:8000", "b 10.0.0.2:8000"]);
      expect(sink.latest("llama")!.find((t) => t.name === "a")).toEqual({ ip: "10.0.0.1", port: 8000, address: "10.0.0.1:8000", name: "a", hostHeader: "10.0.0.1:8000" });

      // Pods the selector matches come and go as they do for a label-selector pool.
      await pods.setState("b", { ip: "10.0.0.2", ready: false });
      await sink.until("llama", ["a 10.0.0.1:8000"]);
      await pods.setState("b", { ip: "10.0.0.2", ready: true });

      applyPool({ app: "llama", track: "next" }, 8000);
      await sink.until("llama", ["b 10.0.0.2:8000"]);
      applyPool({ app: "llama", track: "next" }, 8001);
      await sink.until("llama", ["b 10.0.0.2:8001"]);

      execFileSync("kubectl", ["--kubeconfig", kubeconfig, "delete", "inferencepool", "-n", NAMESPACE, "llama"]);
      await sink.until("llama", []);
      expect(logs.some((l) => l.includes("InferencePool models/llama: no pods (the InferencePool does not exist)"))).toBe(true);
    });
  },
  { kubectl: true },
);
