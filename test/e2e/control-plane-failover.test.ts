// The control plane survives losing its leader: two aggregator processes
// (aggregator.leaderElection.peers, the lowest-listed one that answers
// leads), one real Envoy whose aggregator cluster lists both and health
// checks them, the official OpenAI client sending requests all along. A
// reload is made, the leader is SIGKILLed right after Envoy confirmed it,
// and then: no client sees an error, the model the reload added keeps
// answering, Envoy's view never gets older than the stale bound, the
// standby's snapshot reaches Envoy (the failover time is printed), and a
// reload made after the failover is applied by the new leader. Once over
// plaintext on loopback, once with mutual TLS on the link (Envoy's health
// checks then go over TLS too).
import { mkdtempSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { loadGatewayConfig } from "../../host/config.js";
import { envoyParamsFromGatewayConfig, envoySdsFiles, renderEnvoyXds } from "../../host/envoy/index.js";
import { filterWasmPath, projectRoot } from "../../host/paths.js";
import { startFleet, type Fleet } from "../../testing/fakeserver/index.js";
import { startEnvoy, type EnvoyProcess } from "../../testing/launcher/envoy-process.js";
import { makeCa, makeClientCert, makeServerCert } from "../helpers/certs.js";
import { answers, ClientTraffic, ViewSampler } from "../helpers/failover.js";
import { freePorts, launch, type Launched } from "../helpers/launcher.js";
import { waitFor } from "../helpers/stack.js";

const AGGREGATOR_MAIN = join(projectRoot, "dist", "host", "aggregator", "main.js");
const BASE_MODEL = "llama-3.1-8b";
// gateway.staleView.maxAgeMs's default: past it the filter stops trusting its view.
const STALE_BOUND_MS = 3000;

let fleet: Fleet;
let envoy: EnvoyProcess;
let dir: string;
let configPath: string;
let doc: Record<string, any>;
const aggregators: Array<{ process: Launched; metricsPort: number }> = [];
let traffic: ClientTraffic;
let health: ViewSampler;

function write(next: Record<string, any>): void {
  doc = next;
  const tmp = `${configPath}.tmp`;
  writeFileSync(tmp, stringify(next));
  renameSync(tmp, configPath);
}

async function metricsText(k: number): Promise<string> {
  return (await fetch(`http://127.0.0.1:${aggregators[k].metricsPort}/metrics`)).text();
}

async function metric(k: number, name: string): Promise<number> {
  return Number(new RegExp(`^${name} (\\S+)$`, "m").exec(await metricsText(k))?.[1] ?? NaN);
}

/** Scrapes aggregator `k` made of every pod so far. */
async function scrapes(k: number): Promise<number> {
  const counts = [...(await metricsText(k)).matchAll(/^llm_gateway_endpoint_scrapes_total\{[^}]*\} (\d+)$/gm)];
  return counts.reduce((sum, m) => sum + Number(m[1]), 0);
}

const applied = (k: number) => metric(k, 'llm_gateway_config_reloads_total\\{outcome="applied"\\}');

/** Adds a model that splits to the base model, and waits for aggregator `k` to have applied it (Envoy confirmed it). */
async function addAlias(name: string, k: number): Promise<void> {
  const before = await applied(k);
  write({ ...doc, models: [...(doc.models ?? []), { name, split: [{ model: BASE_MODEL, weight: 1 }] }] });
  await waitFor(`aggregator ${k} to apply the reload adding ${name}`, async () => (await applied(k)) > before);
}

function startAggregator(grpcPort: number, metricsPort: number): Launched {
  const process_ = launch(process.execPath, [AGGREGATOR_MAIN, "--config", configPath, "--port", String(grpcPort), "--metrics-port", String(metricsPort)]);
  aggregators.push({ process: process_, metricsPort });
  return process_;
}

describe.each([
  { link: "plaintext", tls: false },
  { link: "mutual TLS", tls: true },
])("control-plane failover ($link): two aggregators, one Envoy, the leader killed under load", ({ tls }) => {
  let gatewayUrl: string;

  beforeAll(async () => {
    traffic = new ClientTraffic([BASE_MODEL, "sql-lora"]);
    health = new ViewSampler();
    aggregators.length = 0;
    fleet = await startFleet([
      { name: "llama-a", model: BASE_MODEL, adapters: ["sql-lora"] },
      { name: "llama-b", model: BASE_MODEL, adapters: ["sql-lora"] },
    ]);
    dir = mkdtempSync(join(tmpdir(), "cp-failover-"));
    configPath = join(dir, "gateway.yaml");
    const link: { gateway?: object; aggregator?: object } = {};
    if (tls) {
      const ca = makeCa(dir, "control-plane");
      const server = makeServerCert(ca, dir, "aggregator", ["127.0.0.1"]);
      const client = makeClientCert(ca, dir, "envoy", "llm-gateway-envoy");
      link.gateway = { controlPlaneTls: { caFile: ca.certFile, certFile: client.certFile, keyFile: client.keyFile } };
      link.aggregator = { tls: { caFile: ca.certFile, certFile: server.certFile, keyFile: server.keyFile } };
    }
    const [grpc0, grpc1, metrics0, metrics1] = await freePorts(4);
    const peers = [`127.0.0.1:${grpc0}`, `127.0.0.1:${grpc1}`];
    write({
      apiVersion: "llm-gateway/v1",
      kind: "InferenceGatewayConfig",
      gateway: { host: "127.0.0.1", port: 0, adminPort: 0, ...link.gateway },
      aggregator: { host: "127.0.0.1", port: grpc0, metricsPort: metrics0, scrapeIntervalMs: 50, staleAfterMs: 1000, leaderElection: { peers }, ...link.aggregator },
      profiles: { latency: { admission: { maxWaiting: 50 } } },
      pools: [{ name: "llama", baseModel: BASE_MODEL, adapters: ["sql-lora"], endpoints: [fleet.pod("llama-a").address, fleet.pod("llama-b").address] }],
    });
    // The first listed leads; it starts first so the standby finds it answering.
    await startAggregator(grpc0, metrics0).waitForOutput(/aggregator listening/);
    await startAggregator(grpc1, metrics1).waitForOutput(/aggregator listening/);

    const params = envoyParamsFromGatewayConfig(loadGatewayConfig(configPath), { wasmPath: filterWasmPath, sdsDir: dir });
    for (const f of envoySdsFiles(params)) writeFileSync(f.path, f.content);
    envoy = await startEnvoy({ configYaml: renderEnvoyXds(params).bootstrap, concurrency: 2 });
    gatewayUrl = `http://${envoy.listenerAddresses.llm_gateway}`;
    await answers(gatewayUrl, BASE_MODEL, 20_000);
  }, 60_000);

  afterAll(async () => {
    await Promise.all([traffic?.stop(), health?.stop()]);
    for (const a of aggregators) a.process.child.kill("SIGTERM");
    await Promise.all(aggregators.map((a) => a.process.exitWithin(10_000).catch(() => a.process.child.kill("SIGKILL"))));
    await envoy?.stop();
    await fleet?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it("leads with the first listed aggregator; the other stands by, scraping, and refuses Envoy", async () => {
    await waitFor("aggregator 0 to hold Envoy's two streams", async () => (await metric(0, "llm_gateway_connected_streams")) === 1 && (await metric(0, "llm_gateway_ads_streams")) === 1);
    expect(await metric(0, "llm_gateway_aggregator_leading")).toBe(1);
    expect(await metric(1, "llm_gateway_aggregator_leading")).toBe(0);
    expect(await metric(1, "llm_gateway_connected_streams")).toBe(0);
    expect(await metric(1, "llm_gateway_ads_streams")).toBe(0);
    // Warm: the standby scrapes the pods too.
    const before = await scrapes(1);
    expect(before).toBeGreaterThan(0);
    await waitFor("the standby to scrape again", async () => (await scrapes(1)) > before);
  });

  it("fails over within the stale bound with no client error and no reload lost, and the new leader applies later reloads", async () => {
    traffic.start(gatewayUrl, 4);
    health.start(gatewayUrl);
    await waitFor("traffic to flow", () => traffic.ok >= 40);

    // A reload just before the kill: the leader applied it (Envoy confirmed); the model it adds joins the traffic.
    await addAlias("failover-alias", 0);
    // Envoy has its route (the leader waited for that); its snapshot follows within a few ms.
    await answers(gatewayUrl, "failover-alias");
    traffic.models.push("failover-alias");
    const okBeforeKill = traffic.ok;
    await waitFor("requests for the new model", () => traffic.ok >= okBeforeKill + 20);

    // Each aggregator numbers its snapshots from its start time in ms, so the
    // standby's (started a second later) are above any the leader can reach.
    const leaderVersion = await metric(0, "llm_gateway_snapshot_version");
    const standbyVersion = await metric(1, "llm_gateway_snapshot_version");
    expect(standbyVersion).toBeGreaterThan(leaderVersion + 100);
    const killedAt = (traffic.markMs = Date.now());
    aggregators[0].process.child.kill("SIGKILL");
    await waitFor("Envoy to hold the new leader's snapshot", () => health.firstSnapshotAfter(killedAt, standbyVersion) !== null, STALE_BOUND_MS);
    const failoverMs = health.firstSnapshotAfter(killedAt, standbyVersion)! - killedAt;
    await waitFor("the new leader to hold Envoy's two streams", async () => (await metric(1, "llm_gateway_connected_streams")) === 1 && (await metric(1, "llm_gateway_ads_streams")) === 1);
    expect(await metric(1, "llm_gateway_aggregator_leading")).toBe(1);
    const okAtFailover = traffic.ok;
    await waitFor("routing to go on after the failover", () => traffic.ok >= okAtFailover + 40);

    const worstAgeMs = health.worstAgeSince(killedAt);
    console.log(`[failover ${tls ? "mutual TLS" : "plaintext"}] kill -> first snapshot of the new leader at Envoy: ${failoverMs} ms; oldest view Envoy reported: ${worstAgeMs} ms (bound ${STALE_BOUND_MS} ms); ${traffic.ok} requests, ${traffic.failures.length} failed`);
    expect(traffic.failures).toEqual([]);
    expect(worstAgeMs).toBeLessThan(STALE_BOUND_MS);
    expect(failoverMs).toBeLessThan(STALE_BOUND_MS);

    // A reload after the failover reaches Envoy through the new leader.
    await addAlias("after-failover", 1);
    await answers(gatewayUrl, "after-failover");
    await traffic.stop();
    expect(traffic.failures).toEqual([]);
    const rejected = await envoy.stats("update_rejected");
    expect(Object.values(rejected).every((v) => v === 0)).toBe(true);
  }, 60_000);
});
