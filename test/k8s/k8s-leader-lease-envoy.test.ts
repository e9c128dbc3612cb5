// A leader that hangs, with a real Envoy and a real API server: two
// aggregators elect a leader by a Lease, Envoy health-checks both, the
// official OpenAI client sends requests all along, and the leader is
// SIGSTOPped. Its port still accepts connections, so nothing proves it
// dead: Envoy's health checks time out (and close its streams to it), the
// standby takes the Lease once it has run out, and Envoy follows it. No
// client sees an error and the filter's view never gets older than the
// stale bound; the woken leader stands down and routing goes on.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { stringify } from "yaml";
import { loadGatewayConfig } from "../../host/config.js";
import { envoyParamsFromGatewayConfig, renderEnvoyXds } from "../../host/envoy/index.js";
import { filterWasmPath, projectRoot } from "../../host/paths.js";
import { startFleet, type Fleet } from "../../testing/fakeserver/index.js";
import { startEnvoy, type EnvoyProcess } from "../../testing/launcher/envoy-process.js";
import { startLocalApiServer, type LocalApiServer } from "../../testing/localkube/apiserver.js";
import { answers, ClientTraffic, ViewSampler } from "../helpers/failover.js";
import { describeWithApiServer, TestPods } from "../helpers/k8s.js";
import { freePorts, launch, type Launched } from "../helpers/launcher.js";
import { waitFor } from "../helpers/stack.js";

const AGGREGATOR_MAIN = join(projectRoot, "dist", "host", "aggregator", "main.js");
const NS = "gateway";
const MODEL = "llama-3.1-8b";
const DURATION_S = 2;
// The defaults' hung-leader bound is 2900 ms against a 3000 ms stale bound
// (hungLeaderBoundMs); a second more here, so a busy test machine tests
// the mechanism rather than that margin. The measured time is printed.
const STALE_BOUND_MS = 4000;

describeWithApiServer("a hung leader with a Lease and a real Envoy", () => {
  let server: LocalApiServer;
  let fleet: Fleet;
  let envoy: EnvoyProcess;
  let dir: string;
  let gatewayUrl: string;
  const aggregators: Array<{ process: Launched; metricsPort: number }> = [];
  const traffic = new ClientTraffic([MODEL]);
  const view = new ViewSampler();

  async function metric(k: number, name: string): Promise<number> {
    const text = await (await fetch(`http://127.0.0.1:${aggregators[k].metricsPort}/metrics`)).text();
    return Number(new RegExp(`^${name} (\\S+)$`, "m").exec(text)?.[1] ?? NaN);
  }

  beforeAll(async () => {
    server = await startLocalApiServer();
    await new TestPods(server.kubeConfig(), NS).createNamespace();
    fleet = await startFleet([
      { name: "llama-a", model: MODEL },
      { name: "llama-b", model: MODEL },
    ]);
    dir = mkdtempSync(join(tmpdir(), "leader-lease-envoy-"));
    const configPath = join(dir, "gateway.yaml");
    const [grpc0, grpc1, metrics0, metrics1] = await freePorts(4);
    writeFileSync(configPath, stringify({
      gateway: { host: "127.0.0.1", port: 0, adminPort: 0, staleView: { maxAgeMs: STALE_BOUND_MS } },
      aggregator: { host: "127.0.0.1", leaderElection: { lease: { namespace: NS, durationS: DURATION_S, kubeconfig: server.writeKubeconfig() } } },
      pools: [{ name: "llama", baseModel: MODEL, endpoints: [fleet.pod("llama-a").address, fleet.pod("llama-b").address] }],
    }));
    for (const [identity, grpcPort, metricsPort] of [["agg-a", grpc0, metrics0], ["agg-b", grpc1, metrics1]] as const) {
      const child = launch(process.execPath, [AGGREGATOR_MAIN, "--config", configPath, "--port", String(grpcPort), "--metrics-port", String(metricsPort), "--identity", identity]);
      aggregators.push({ process: child, metricsPort });
      await child.waitForOutput(/aggregator listening/);
    }
    // In a cluster one name (a headless Service) resolves to both; here they are listed.
    const params = envoyParamsFromGatewayConfig(loadGatewayConfig(configPath), { wasmPath: filterWasmPath });
    params.controlPlaneFailover = { ...params.controlPlaneFailover!, peers: [`127.0.0.1:${grpc0}`, `127.0.0.1:${grpc1}`] };
    envoy = await startEnvoy({ configYaml: renderEnvoyXds(params).bootstrap, concurrency: 2 });
    gatewayUrl = `http://${envoy.listenerAddresses.llm_gateway}`;
    await answers(gatewayUrl, MODEL, 20_000);
  }, 120_000);

  afterAll(async () => {
    await Promise.all([traffic.stop(), view.stop()]);
    for (const a of aggregators) {
      a.process.child.kill("SIGCONT");
      a.process.child.kill("SIGKILL");
    }
    await envoy?.stop();
    await fleet?.close();
    await server?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it("fails over within the stale bound with no client error, and the woken leader stands down", async () => {
    await waitFor("agg-a to hold Envoy's snapshot stream", async () => (await metric(0, "llm_gateway_connected_streams")) === 1);
    expect(await metric(1, "llm_gateway_aggregator_leading")).toBe(0);
    traffic.start(gatewayUrl, 4);
    view.start(gatewayUrl);
    await waitFor("traffic to flow", () => traffic.ok >= 40);

    const standbyVersion = await metric(1, "llm_gateway_snapshot_version");
    const stoppedAt = (traffic.markMs = Date.now());
    aggregators[0].process.child.kill("SIGSTOP");
    await waitFor("Envoy to hold the new leader's snapshot", () => view.firstSnapshotAfter(stoppedAt, standbyVersion) !== null, STALE_BOUND_MS * 2);
    const failoverMs = view.firstSnapshotAfter(stoppedAt, standbyVersion)! - stoppedAt;
    const okAtFailover = traffic.ok;
    await waitFor("routing to go on after the failover", () => traffic.ok >= okAtFailover + 40);
    const worstAgeMs = view.worstAgeSince(stoppedAt);
    console.log(`[lease failover, Envoy] SIGSTOP of the leader -> its standby's first snapshot at Envoy: ${failoverMs} ms; oldest view Envoy reported: ${worstAgeMs} ms (bound ${STALE_BOUND_MS} ms, Lease ${DURATION_S * 1000} ms)`);
    expect(traffic.failures).toEqual([]);
    expect(worstAgeMs).toBeLessThan(STALE_BOUND_MS);

    aggregators[0].process.child.kill("SIGCONT");
    await waitFor("the woken leader to stand down", async () => (await metric(0, "llm_gateway_aggregator_leading")) === 0);
    const okAfterWake = traffic.ok;
    await waitFor("routing to go on after the wake", () => traffic.ok >= okAfterWake + 40);
    expect(await metric(0, "llm_gateway_connected_streams")).toBe(0);
    expect(await metric(1, "llm_gateway_connected_streams")).toBe(1);
    await traffic.stop();
    expect(traffic.failures).toEqual([]);
  }, 60_000);
});
