// A config reload's diff (host/aggregator/config-diff.ts) and its order of
// work (host/aggregator/reload.ts) against a gRPC client playing Envoy: the
// new config is put in force only after Envoy accepted the new clusters and
// routes, a NACK refuses the reload and sends the previous resources again,
// a pool that goes keeps its cluster until the drain is over.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { describeChanges, fixedFieldChanges } from "../../host/aggregator/config-diff.js";
import { startSnapshotServer, type SnapshotServer } from "../../host/aggregator/push.js";
import { createReloader, type Reloader } from "../../host/aggregator/reload.js";
import { CLUSTER_TYPE as CDS, ROUTE_CONFIGURATION_TYPE as RDS, createDiscoveryServer, type DiscoveryServer } from "../../host/aggregator/xds.js";
import { parseGatewayConfig, type GatewayConfig } from "../../host/config.js";
import { projectRoot } from "../../host/paths.js";
import { FakeEnvoy, type AdsResponse } from "../helpers/fake-envoy.js";
import { killLaunched, launch } from "../helpers/launcher.js";
import { waitFor } from "../helpers/stack.js";

const base = {
  gateway: { port: 0, adminPort: 0 },
  aggregator: { port: 0, metricsPort: 0 },
  pools: [
    { name: "llama", baseModel: "llama-3.1-8b", adapters: ["sql-lora"], endpoints: ["127.0.0.1:18001"] },
    { name: "qwen", baseModel: "qwen3-32b", endpoints: ["127.0.0.1:18002"] },
  ],
};
type Doc = Record<string, any>;
const config = (change: (d: Doc) => void = () => {}): GatewayConfig => {
  const d = structuredClone(base) as Doc;
  change(d);
  return parseGatewayConfig(stringify(d), "test");
};

describe("what an edit changes", () => {
  it("names every field only a restart can change, with why", () => {
    const next = config((d) => {
      d.gateway.maxBodyBytes = 1024;
      d.gateway.staleView = { maxAgeMs: 5000 };
      d.aggregator.port = 50052;
      d.traffic = { critical: "any" };
      d.pools[0].weights = { queue: 3 };
    });
    expect(fixedFieldChanges(config(), next)).toEqual([
      "gateway.maxBodyBytes: is part of Envoy's bootstrap (listener, filter settings); restart Envoy to change it",
      "gateway.staleView.maxAgeMs: is part of Envoy's bootstrap (listener, filter settings); restart Envoy to change it",
      "traffic.critical: is part of the Wasm filter's settings in Envoy's bootstrap; restart Envoy to change it",
      "aggregator.port: is read once when the aggregator starts; restart it to change it",
    ]);
  });

  it("sums up the rest for the log", () => {
    const next = config((d) => {
      d.pools[0].weights = { queue: 3 };
      d.pools[0].adapters = ["sql-lora", "chat-lora"];
      d.pools[1] = { name: "mistral", baseModel: "mistral-7b", endpoints: ["127.0.0.1:18003"] };
      d.profiles = { latency: { admission: { maxWaiting: 4 } } };
      d.models = [{ name: "sql-lora", priority: "critical" }];
    });
    expect(describeChanges(config(), next)).toEqual([
      "pool mistral added",
      "pool qwen removed",
      "pool llama: adapters, weights",
      "profiles.latency",
      "models",
    ]);
    expect(describeChanges(config(), config())).toEqual([]);
    // Any field of a pool counts, a discovery selector too.
    const selector = (app: string) => (d: Doc) => {
      d.pools[1] = { name: "qwen", baseModel: "qwen3-32b", kubernetes: { namespace: "models", selector: { matchLabels: { app } }, port: 8000 } };
    };
    expect(describeChanges(config(selector("qwen")), config(selector("qwen-next")))).toEqual(["pool qwen: kubernetes"]);
    expect(describeChanges(config(), config((d) => d.pools.reverse()))).toEqual(["the order of pools or other details"]);
    // Deadlines and batch slots are reloadable like the rest, and named.
    const timed = config((d) => {
      d.pools[1].batchSlots = 64;
      d.profiles = { throughput: { deadlines: { streamIdleMs: 1000 } } };
    });
    expect(fixedFieldChanges(config(), timed)).toEqual([]);
    expect(describeChanges(config(), timed)).toEqual(["pool qwen: batchSlots", "profiles.throughput"]);
  });
});

describe("a reload against Envoy", () => {
  let discovery: DiscoveryServer;
  let server: SnapshotServer;
  let envoy: FakeEnvoy;
  let reloader: Reloader;
  let inForce: GatewayConfig;
  const calls: string[] = [];
  const logs: string[] = [];
  const outcomes = { applied: 0, refused: 0 };

  /** Subscribes as Envoy does and accepts the first clusters and endpoints. */
  async function subscribe(): Promise<{ clusters: AdsResponse; endpoints: AdsResponse }> {
    envoy = new FakeEnvoy(discovery.service.definition, `127.0.0.1:${server.port}`);
    envoy.send({ type_url: CDS, resource_names: [] });
    const clusters = await envoy.next();
    envoy.ack(clusters);
    const names = clusters.resources.map((c) => c.name as string);
    envoy.send({ resource_names: names });
    const endpoints = await envoy.next();
    envoy.ack(endpoints, names);
    return { clusters, endpoints };
  }

  beforeEach(async () => {
    calls.length = logs.length = 0;
    outcomes.applied = outcomes.refused = 0;
    inForce = config();
    discovery = createDiscoveryServer({ log: () => {} });
    discovery.setEndpoints(new Map(inForce.pools.map((p) => [p.name, p.endpoints])));
    reloader = createReloader<GatewayConfig>({
      target: {
        current: () => inForce,
        prepare: async (next) => {
          calls.push("prepare");
          discovery.setEndpoints(new Map(next.pools.map((p) => [p.name, p.endpoints])));
          return next;
        },
        commit: (next) => {
          calls.push("commit");
          inForce = next;
        },
        abandon: () => calls.push("abandon"),
      },
      discovery,
      log: (l) => logs.push(l),
      telemetry: { reload: (o) => outcomes[o]++ },
      confirmTimeoutMs: 2_000,
      drainMs: 300,
    });
    server = await startSnapshotServer({ host: "127.0.0.1", port: 0, current: () => ({ version: 1, models: [], pools: [], generatedUnixMs: 0 }), log: () => {}, services: [discovery.service] });
  });
  afterEach(async () => {
    envoy?.close();
    reloader.close();
    discovery.close();
    await server.close();
  });

  it("puts the new config in force only once Envoy accepted its clusters and has their endpoints", async () => {
    const { endpoints: eds } = await subscribe();
    const next = config((d) => d.pools.push({ name: "mistral", baseModel: "mistral-7b", endpoints: ["127.0.0.1:18003"] }));
    const reloading = reloader.reload(next);
    const clusters = await envoy.next();
    expect(clusters.resources.map((c) => c.name)).toEqual(["llm_gateway_pool_llama", "llm_gateway_pool_qwen", "llm_gateway_pool_mistral"]);
    expect(calls).toEqual(["prepare"]);
    envoy.ack(clusters);
    await envoy.nothingFor(200); // the routes did not change: no route table is sent
    expect(calls).toEqual(["prepare"]);
    // As Envoy asks for a new cluster's endpoints once it has the cluster.
    envoy.send({ resource_names: ["llm_gateway_pool_llama", "llm_gateway_pool_qwen", "llm_gateway_pool_mistral"], response_nonce: eds.nonce, version_info: eds.version_info });
    const endpoints = await envoy.next();
    envoy.ack(endpoints, ["llm_gateway_pool_llama", "llm_gateway_pool_qwen", "llm_gateway_pool_mistral"]);
    expect(await reloading).toEqual({ applied: true, changes: ["pool mistral added"] });
    expect(calls).toEqual(["prepare", "commit"]);
    expect(inForce).toBe(next);
    expect(outcomes).toEqual({ applied: 1, refused: 0 });
    expect(logs).toContain("config reload applied: pool mistral added");
  });

  it("applies a reload one Envoy rejects: that Envoy keeps its last good clusters, nothing is rolled back", async () => {
    const { clusters: first } = await subscribe();
    const next = config((d) => d.pools.push({ name: "mistral", baseModel: "mistral-7b", endpoints: ["127.0.0.1:18003"] }));
    const reloading = reloader.reload(next);
    const offered = await envoy.next();
    envoy.send({ type_url: CDS, version_info: first.version_info, response_nonce: offered.nonce, error_detail: { message: "cluster refused" } });
    const result = await reloading;
    expect(result.applied).toBe(true);
    expect(calls).toEqual(["prepare", "commit"]);
    expect(inForce).toBe(next);
    // No earlier clusters sent again: the Envoy that refused runs on what it had.
    await envoy.nothingFor();
    expect(outcomes).toEqual({ applied: 1, refused: 0 });
    expect(logs.some((l) => /^config reload goes ahead; Envoys that refused it keep their last good resources: Envoy \(ads stream \d+, .*\) rejected clusters version \d+: cluster refused/.test(l))).toBe(true);
  });

  it("sends Envoy the new stream routes when a profile's streamIdleMs changes, and only then puts it in force", async () => {
    await subscribe();
    envoy.send({ type_url: RDS, resource_names: ["llm_gateway"] });
    const first = await envoy.next();
    envoy.ack(first, ["llm_gateway"]);
    /** The stream routes' per-try idle timeouts in ms (Durations decode as seconds and nanos). */
    const idle = (r: AdsResponse) =>
      r.resources[0].virtual_hosts[0].routes.flatMap((route: Doc) => {
        const d = route.route?.retry_policy?.per_try_idle_timeout;
        return d ? [Number(d.seconds) * 1000 + d.nanos / 1e6] : [];
      });
    expect(idle(first)).toEqual([90_000, 90_000]);
    const reloading = reloader.reload(config((d) => (d.profiles = { latency: { deadlines: { streamIdleMs: 1500 } } })));
    const routes = await envoy.next();
    expect(routes.type_url).toBe(RDS);
    expect(idle(routes)).toEqual([1500, 1500]);
    expect(calls).toEqual(["prepare"]);
    envoy.ack(routes, ["llm_gateway"]);
    expect(await reloading).toEqual({ applied: true, changes: ["profiles.latency"] });
    expect(calls).toEqual(["prepare", "commit"]);
  });

  it("refuses an edit of a fixed field without touching anything", async () => {
    const result = await reloader.reload(config((d) => (d.gateway.port = 8081)));
    expect(result).toEqual({ applied: false, reason: "gateway.port: is part of Envoy's bootstrap (listener, filter settings); restart Envoy to change it" });
    expect(calls).toEqual([]);
    expect(outcomes).toEqual({ applied: 0, refused: 1 });
  });

  it("keeps a dropped pool's cluster until the drain is over, then removes it", async () => {
    await subscribe();
    const reloading = reloader.reload(config((d) => d.pools.pop()));
    // The pool stays in the routes and clusters while filters still name it: nothing changed for Envoy yet.
    expect(await reloading).toEqual({ applied: true, changes: ["pool qwen removed"] });
    expect(calls).toEqual(["prepare", "commit"]);
    const removed = await envoy.next(2_000);
    expect(removed.type_url).toBe(CDS);
    expect(removed.resources.map((c) => c.name)).toEqual(["llm_gateway_pool_llama"]);
    envoy.ack(removed);
    await waitFor("the removal to be logged", () => logs.some((l) => l === "routes and clusters of dropped pools removed: qwen"));
  });

  it("goes ahead, saying so, when Envoy does not answer in time", async () => {
    await subscribe();
    const result = await reloader.reload(config((d) => d.pools.push({ name: "mistral", baseModel: "mistral-7b", endpoints: ["127.0.0.1:18003"] })));
    expect(result).toEqual({ applied: true, changes: ["pool mistral added"] });
    expect(logs.some((l) => /goes ahead without every Envoy's confirmation: not confirmed within 2000 ms: ads stream \d+ .* waits for clusters/.test(l))).toBe(true);
  });
});

describe("the aggregator CLI", () => {
  afterEach(() => killLaunched());

  it("applies edits of its config file, and the file again on SIGHUP", async () => {
    const dir = mkdtempSync(join(tmpdir(), "aggregator-cli-"));
    try {
      const path = join(dir, "gateway.yaml");
      writeFileSync(path, stringify(base));
      const cli = launch(process.execPath, [join(projectRoot, "dist/host/aggregator/main.js"), "--config", path]);
      await cli.waitForOutput(/^\[aggregator\] watching .* for changes$/m);
      writeFileSync(path, stringify({ ...base, pools: [{ ...base.pools[0], weights: { queue: 3 } }, base.pools[1]] }));
      await cli.waitForOutput(/^\[aggregator\] config reload applied: pool llama: weights$/m);
      cli.child.kill("SIGHUP");
      await cli.waitForOutput(/^\[aggregator\] config reload: no change$/m);
      cli.child.kill("SIGTERM");
      expect(await cli.exitWithin(10_000)).toEqual({ code: 0, signal: null });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
