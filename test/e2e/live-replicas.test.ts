// Many gateways, one control plane, live: the `npm start` launcher runs 3
// Envoys (each loading build/filter.wasm) behind a round-robin front (a
// fourth, plain Envoy that skips a replica that refuses or resets), two
// aggregator processes electing a leader by static peers, and fake GPU
// pods. While loops of the official OpenAI client send requests through
// the front: the leading aggregator is SIGKILLed, then one of the Envoys.
// No client may see an error (a refusal or a timeout included), the standby
// must lead and hold every Envoy's stream, and the two Envoys left must go
// on routing. A stream already half-written by the Envoy that dies cannot be
// saved by any front, so the loops are unary; streams are checked after the
// kill.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { ASK, ClientTraffic } from "../helpers/failover.js";
import { freePorts, isRunning, killLaunched, launchGateway, portIsFree, type Launched } from "../helpers/launcher.js";
import { waitFor } from "../helpers/stack.js";

const MODEL = "llama-3.1-8b";
const ENVOYS = 3;
const LOOPS = 4;

interface Part {
  pid: number;
}
interface EnvoyPart extends Part {
  adminUrl: string;
}

let dir: string;
let gateway: Launched;
let frontUrl: string;
let metricsBase: number;
const envoys: EnvoyPart[] = [];
const aggregatorPids: number[] = [];
const traffic = new ClientTraffic([MODEL, "sql-lora"]);

/** `n` consecutive free loopback ports (the launcher numbers replicas from a base port). */
async function freeRun(n: number): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const [base] = await freePorts(1);
    const rest = await Promise.all(Array.from({ length: n - 1 }, (_, k) => portIsFree(base + k + 1)));
    if (base + n < 65536 && rest.every(Boolean)) return base;
  }
  throw new Error(`no ${n} consecutive free ports`);
}

async function metric(aggregator: number, name: string): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${metricsBase + aggregator}/metrics`)).text();
  return Number(new RegExp(`^${name} (\\S+)$`, "m").exec(text)?.[1] ?? NaN);
}

/** Requests Envoy `k` has answered, from its admin. */
async function answered(k: number): Promise<number> {
  const text = await (await fetch(`${envoys[k].adminUrl}/stats?filter=^http\\.llm_gateway\\.downstream_rq_completed$`)).text();
  return Number(/: (\d+)/.exec(text)?.[1] ?? NaN);
}

const holdsStreams = async (aggregator: number, count: number) =>
  (await metric(aggregator, "llm_gateway_connected_streams")) === count && (await metric(aggregator, "llm_gateway_ads_streams")) === count;

async function moreTraffic(n: number, what: string): Promise<void> {
  const from = traffic.ok;
  await waitFor(what, () => traffic.ok >= from + n, 20_000);
}

describe("live replicas: 3 Envoys behind a round-robin front, 2 aggregators, under load", () => {
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "live-replicas-"));
    const gatewayBase = await freeRun(ENVOYS);
    const adminBase = await freeRun(ENVOYS);
    const grpcBase = await freeRun(2);
    metricsBase = await freeRun(2);
    const [front, ...podPorts] = await freePorts(4);
    const pods = podPorts.map((port, k) => ({ name: `llama-${k}`, pool: "llama", port }));
    writeFileSync(join(dir, "fleet.yaml"), stringify({ pods }));
    writeFileSync(join(dir, "gateway.yaml"), stringify({
      apiVersion: "llm-gateway/v1",
      kind: "InferenceGatewayConfig",
      gateway: { host: "127.0.0.1", port: gatewayBase, adminPort: adminBase },
      aggregator: {
        host: "127.0.0.1", port: grpcBase, metricsPort: metricsBase, scrapeIntervalMs: 50, staleAfterMs: 1000,
        leaderElection: { peers: [`127.0.0.1:${grpcBase}`, `127.0.0.1:${grpcBase + 1}`] },
      },
      profiles: { latency: { admission: { maxWaiting: 50 } } },
      pools: [{ name: "llama", baseModel: MODEL, adapters: ["sql-lora"], endpoints: pods.map((p) => `127.0.0.1:${p.port}`) }],
    }));
    gateway = launchGateway([
      "--config", join(dir, "gateway.yaml"), "--fleet", join(dir, "fleet.yaml"), "--run-dir", join(dir, "runs"),
      "--envoys", String(ENVOYS), "--aggregators", "2", "--front", String(front),
    ]);
    frontUrl = (await gateway.waitForOutput(/gateway ready at (\S+)/, 60_000))[1];
    const out = gateway.output();
    for (const m of out.matchAll(/^aggregator (\d) on \S+ \(pid (\d+)\)/gm)) aggregatorPids[Number(m[1])] = Number(m[2]);
    for (const m of out.matchAll(/^envoy (\d) on \S+, admin on (\S+) \(pid (\d+)\)/gm)) envoys[Number(m[1])] = { adminUrl: m[2], pid: Number(m[3]) };
    expect(frontUrl).toBe(`http://127.0.0.1:${front}`);
    expect(envoys.map((e) => e.adminUrl)).toEqual(Array.from({ length: ENVOYS }, (_, k) => `http://127.0.0.1:${adminBase + k}`));
    expect(out).toContain(`envoy 2 on 127.0.0.1:${gatewayBase + 2}`);
    expect(aggregatorPids).toHaveLength(2);
  }, 90_000);

  afterAll(async () => {
    await traffic.stop();
    const pids = [...aggregatorPids, ...envoys.map((e) => e.pid)];
    if (gateway) {
      gateway.child.kill("SIGTERM");
      await gateway.exitWithin(20_000).catch(() => killLaunched());
    }
    // Everything the launcher started went with it.
    await waitFor("the launcher's processes to end", () => pids.every((pid) => !isRunning(pid)), 10_000).catch(() => {
      for (const pid of pids.filter(isRunning)) process.kill(pid, "SIGKILL");
    });
    if (dir) rmSync(dir, { recursive: true, force: true });
  }, 40_000);

  it("sends requests to every Envoy in turn; the first aggregator leads and holds all three Envoys' streams", async () => {
    await waitFor("aggregator 0 to hold every Envoy's streams", () => holdsStreams(0, ENVOYS));
    expect(await metric(0, "llm_gateway_aggregator_leading")).toBe(1);
    expect(await metric(1, "llm_gateway_aggregator_leading")).toBe(0);
    expect(await metric(1, "llm_gateway_connected_streams")).toBe(0);
    traffic.start(frontUrl, LOOPS, { streams: false });
    const before = await Promise.all(envoys.map((_, k) => answered(k)));
    await moreTraffic(60, "traffic through the front");
    const after = await Promise.all(envoys.map((_, k) => answered(k)));
    // Round robin: each Envoy answered about a third (at least a fifth) of them.
    for (let k = 0; k < ENVOYS; k++) expect(after[k] - before[k], `envoy ${k}`).toBeGreaterThanOrEqual(12);
    expect(traffic.failures).toEqual([]);
  });

  it("loses the leading aggregator with no client error: the standby leads and every Envoy follows it", async () => {
    traffic.markMs = Date.now();
    process.kill(aggregatorPids[0], "SIGKILL");
    await waitFor("aggregator 1 to lead", async () => (await metric(1, "llm_gateway_aggregator_leading")) === 1, 3000);
    await waitFor("aggregator 1 to hold every Envoy's streams", () => holdsStreams(1, ENVOYS), 5000);
    await gateway.waitForOutput(/aggregator 0 exited; 1 of 2 left/);
    await moreTraffic(60, "traffic after the failover");
    expect(traffic.failures).toEqual([]);
  });

  it("loses an Envoy with no client error: the front skips it and the other two go on routing", async () => {
    const before = await Promise.all([0, 2].map(answered));
    traffic.markMs = Date.now();
    process.kill(envoys[1].pid, "SIGKILL");
    await gateway.waitForOutput(/envoy 1 exited; 2 of 3 left/);
    await moreTraffic(90, "traffic after the Envoy died");
    const after = await Promise.all([0, 2].map(answered));
    for (const k of [0, 1]) expect(after[k] - before[k], `envoy ${k === 0 ? 0 : 2}`).toBeGreaterThanOrEqual(20);
    await waitFor("aggregator 1 to hold the two Envoys' streams", () => holdsStreams(1, ENVOYS - 1), 5000);
    expect(await metric(1, "llm_gateway_aggregator_leading")).toBe(1);
    expect(traffic.failures).toEqual([]);

    // Streams started now go to the two Envoys left.
    const client = new OpenAI({ baseURL: `${frontUrl}/v1`, apiKey: "x", maxRetries: 0 });
    for (let i = 0; i < 6; i++) {
      let chunks = 0;
      for await (const _ of await client.chat.completions.create({ model: MODEL, ...ASK, stream: true })) chunks++;
      expect(chunks).toBeGreaterThanOrEqual(ASK.max_tokens);
    }
    await traffic.stop();
    expect(traffic.failures).toEqual([]);
  }, 40_000);
});
