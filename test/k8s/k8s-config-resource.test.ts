// The gateway config as an InferenceGatewayConfig object, against a real
// kube-apiserver: the generated CRD is served; kubectl and the API server
// refuse what its schema refuses; the aggregator (its real CLI) starts from
// the object, applies a good edit as it does a file's, refuses one its own
// cross-field checks refuse, and says which in the object's status with the
// generation it judged.
import { execFileSync, spawnSync } from "node:child_process";
import { join } from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { stringify } from "yaml";
import { projectRoot } from "../../host/paths.js";
import { startLocalApiServer, type LocalApiServer } from "../../testing/localkube/apiserver.js";
import { describeWithApiServer } from "../helpers/k8s.js";
import { killLaunched, launch, type Launched } from "../helpers/launcher.js";
import { waitFor } from "../helpers/stack.js";

const NAMESPACE = "gateway";
const NAME = "llm-gateway";
const CRD = join(projectRoot, "deploy/kubernetes/base/crd.yaml");

describeWithApiServer(
  "InferenceGatewayConfig resource (real API server, kubectl, aggregator CLI)",
  () => {
    let kube: LocalApiServer;
    let kubeconfig: string;
    let aggregator: Launched;
    const previousKubeconfig = process.env.KUBECONFIG;

    const kubectl = (args: string[], input?: string) => spawnSync("kubectl", ["--kubeconfig", kubeconfig, ...args], { input, encoding: "utf8" });
    const spec = (change: (s: Record<string, any>) => void = () => {}) => {
      const s: Record<string, any> = {
        gateway: { host: "127.0.0.1", port: 0, adminPort: 0 },
        aggregator: { host: "127.0.0.1", port: 0, metricsPort: 0 },
        pools: [{ name: "llama", baseModel: "llama-3.1-8b", endpoints: ["127.0.0.1:9"] }],
      };
      change(s);
      return s;
    };
    const object = (s: Record<string, any>) =>
      stringify({ apiVersion: "llm-gateway.io/v1", kind: "InferenceGatewayConfig", metadata: { name: NAME, namespace: NAMESPACE }, spec: s });
    const apply = (s: Record<string, any>, extra: string[] = []) => kubectl(["apply", ...extra, "-f", "-"], object(s));
    const read = () => JSON.parse(kubectl(["get", "inferencegatewayconfig", "-n", NAMESPACE, NAME, "-o", "json"]).stdout);
    const accepted = (o: any) => o.status?.conditions?.find((c: any) => c.type === "Accepted");
    /** Waits until the status judges the object's current generation, and returns the Accepted condition. */
    async function verdictOf(generation: number): Promise<any> {
      let cond: any;
      await waitFor(`status of generation ${generation} (last: ${JSON.stringify(cond)})`, () => {
        const o = read();
        cond = accepted(o);
        return o.status?.observedGeneration === generation && cond?.observedGeneration === generation;
      }, 20_000).catch((err) => {
        throw new Error(`${(err as Error).message}\naggregator output:\n${aggregator?.output()}`);
      });
      return cond;
    }

    beforeAll(async () => {
      kube = await startLocalApiServer();
      kubeconfig = kube.writeKubeconfig();
      execFileSync("kubectl", ["--kubeconfig", kubeconfig, "apply", "-f", CRD]);
      execFileSync("kubectl", ["--kubeconfig", kubeconfig, "wait", "--for=condition=Established", "--timeout=30s", "crd/inferencegatewayconfigs.llm-gateway.io"]);
      execFileSync("kubectl", ["--kubeconfig", kubeconfig, "create", "namespace", NAMESPACE]);
      // kubectl validates against the OpenAPI document the server publishes a moment after the CRD is established.
      await waitFor("the CRD's schema in the published OpenAPI", () => kubectl(["explain", "inferencegatewayconfig.spec.pools"]).status === 0, 30_000);
    }, 90_000);

    afterAll(async () => {
      killLaunched();
      if (previousKubeconfig === undefined) delete process.env.KUBECONFIG;
      else process.env.KUBECONFIG = previousKubeconfig;
      await kube?.stop();
    }, 60_000);

    it("the API server itself refuses a wrong enum, range or type, naming each field", () => {
      const bad = apply(spec((s) => ((s.pools[0].engine = "vllmx"), (s.aggregator.port = 70000), (s.gateway.maxBodyBytes = "big"))), ["--validate=false"]);
      expect(bad.status).not.toBe(0);
      expect(bad.stderr).toContain('The InferenceGatewayConfig "llm-gateway" is invalid');
      expect(bad.stderr).toContain('spec.pools.engine: Unsupported value: "vllmx"');
      expect(bad.stderr).toContain("spec.aggregator.port: Invalid value: 70000");
      expect(bad.stderr).toContain('spec.gateway.maxBodyBytes: Invalid value: "string"');
      expect(kubectl(["get", "inferencegatewayconfig", "-n", NAMESPACE, NAME]).status).not.toBe(0);
    });

    it("kubectl's validation, against the schema the server publishes, refuses an unknown field the 1.20 server would prune", () => {
      const unknown = apply(spec((s) => (s.pools[0].bogus = 1)));
      expect(unknown.status).not.toBe(0);
      expect(unknown.stderr).toContain('unknown field "bogus" in io.llm-gateway.v1.InferenceGatewayConfig.spec.pools');
      expect(kubectl(["get", "inferencegatewayconfig", "-n", NAMESPACE, NAME]).status).not.toBe(0);
    });

    it("the aggregator starts from the object and reports it Accepted", async () => {
      expect(apply(spec()).status).toBe(0);
      process.env.KUBECONFIG = kubeconfig;
      aggregator = launch(process.execPath, [join(projectRoot, "dist/host/aggregator/main.js"), "--config-resource", `${NAMESPACE}/${NAME}`]);
      await aggregator.waitForOutput(/^aggregator listening grpc=/m);
      const cond = await verdictOf(1);
      expect(cond).toMatchObject({ status: "True", reason: "Applied" });
      // The printer column.
      expect(kubectl(["get", "igc", "-n", NAMESPACE]).stdout).toMatch(new RegExp(`^${NAME}\\s+True\\s+Applied\\s`, "m"));
    });

    it("an edit the aggregator's cross-field checks refuse shows in status with the field and the generation", async () => {
      expect(apply(spec((s) => s.pools.push({ name: "llama-copy", baseModel: "llama-3.1-8b", endpoints: ["127.0.0.1:10"] }))).status).toBe(0);
      const cond = await verdictOf(2);
      expect(cond).toMatchObject({ status: "False", reason: "Invalid", observedGeneration: 2 });
      expect(cond.message).toContain('pools[1].baseModel: model name "llama-3.1-8b" is already used by pools[0].baseModel');
      await aggregator.waitForOutput(/config reload refused, the config in force stays: .*invalid gateway config:\n\s+pools\[1\]\.baseModel/, 5_000);
    });

    it("a good edit is hot-reloaded and reported Accepted again", async () => {
      expect(apply(spec((s) => (s.pools[0].weights = { queue: 3 }))).status).toBe(0);
      const cond = await verdictOf(3);
      expect(cond).toMatchObject({ status: "True", reason: "Applied", message: "applied: pool llama: weights" });
      await aggregator.waitForOutput(/^\[aggregator\] config reload applied: pool llama: weights$/m, 5_000);
    });

    it("a listener change needs a restart: refused as RestartRequired, naming the field", async () => {
      expect(apply(spec((s) => ((s.pools[0].weights = { queue: 3 }), (s.gateway.port = 8081)))).status).toBe(0);
      const cond = await verdictOf(4);
      expect(cond).toMatchObject({ status: "False", reason: "RestartRequired" });
      expect(cond.message).toContain("gateway.port: is part of Envoy's bootstrap");
      aggregator.child.kill("SIGTERM");
      expect(await aggregator.exitWithin(10_000)).toEqual({ code: 0, signal: null });
    });

    const startAggregator = () => launch(process.execPath, [join(projectRoot, "dist/host/aggregator/main.js"), "--config-resource", `${NAMESPACE}/${NAME}`]);

    it("a restarted aggregator (the documented rollout) takes the listener change: Accepted again", async () => {
      aggregator = startAggregator();
      await aggregator.waitForOutput(/^aggregator listening grpc=/m);
      expect(await verdictOf(4)).toMatchObject({ status: "True", reason: "Applied" });
      aggregator.child.kill("SIGTERM");
      expect(await aggregator.exitWithin(10_000)).toEqual({ code: 0, signal: null });
    });

    it("an aggregator does not start on an invalid object, and says why in its status", async () => {
      expect(apply(spec((s) => ((s.gateway.port = 8081), (s.aggregator.staleAfterMs = 10), (s.aggregator.scrapeIntervalMs = 50)))).status).toBe(0);
      aggregator = startAggregator();
      const exit = await aggregator.exitWithin(20_000);
      expect(exit.code).toBe(1);
      expect(aggregator.output()).toContain("aggregator.staleAfterMs: must be greater than scrapeIntervalMs (50)");
      const cond = await verdictOf(5);
      expect(cond).toMatchObject({ status: "False", reason: "Invalid" });
      expect(cond.message).toContain("aggregator.staleAfterMs");
    });
  },
  { kubectl: true },
);
