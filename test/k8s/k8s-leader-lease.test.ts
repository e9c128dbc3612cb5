// Leader election by a coordination.k8s.io/v1 Lease on a real API server:
// two aggregator processes (aggregator.leaderElection.lease), running as the
// aggregator's ServiceAccount with deploy/kubernetes/base/rbac.yaml applied.
// One holds the Lease and serves, the other stands by; the holder is
// SIGKILLed (its port refuses: the standby takes over without waiting the
// Lease out), SIGSTOPped (its port still accepts: the standby waits for the
// Lease to run out, and the frozen one stands down when it wakes), and
// SIGTERMed (it releases the Lease on the way out).
import { CoordinationV1Api, type V1Lease } from "@kubernetes/client-node";
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, expect, it } from "vitest";
import { stringify } from "yaml";
import { projectRoot } from "../../host/paths.js";
import { startFleet, type Fleet } from "../../testing/fakeserver/index.js";
import { startLocalApiServer, type LocalApiServer } from "../../testing/localkube/apiserver.js";
import { describeWithApiServer, TestPods } from "../helpers/k8s.js";
import { freePorts, launch, type Launched } from "../helpers/launcher.js";
import { waitFor } from "../helpers/stack.js";

const RBAC_YAML = fileURLToPath(new URL("../../deploy/kubernetes/base/rbac.yaml", import.meta.url));
const AGGREGATOR_MAIN = join(projectRoot, "dist", "host", "aggregator", "main.js");
const NS = "gateway";
const LEASE = "llm-gateway-aggregator";
const DURATION_S = 2;
const SERVICE_ACCOUNT = `system:serviceaccount:${NS}:llm-gateway-aggregator`;

interface Aggregator {
  identity: string;
  process: Launched;
  metricsPort: number;
}

describeWithApiServer("aggregator leader election by a Lease on a real API server", () => {
  let server: LocalApiServer;
  let fleet: Fleet;
  let dir: string;
  let configPath: string;
  let kubeconfigPath: string;
  let leases: CoordinationV1Api;
  const running: Aggregator[] = [];

  const lease = (): Promise<V1Lease> => leases.readNamespacedLease({ name: LEASE, namespace: NS });
  const holder = async () => (await lease()).spec?.holderIdentity ?? "";

  async function leading(a: Aggregator): Promise<number> {
    const text = await (await fetch(`http://127.0.0.1:${a.metricsPort}/metrics`)).text();
    return Number(/^llm_gateway_aggregator_leading (\d+)$/m.exec(text)?.[1] ?? NaN);
  }

  async function start(identity: string): Promise<Aggregator> {
    const [grpcPort, metricsPort] = await freePorts(2);
    const child = launch(process.execPath, [AGGREGATOR_MAIN, "--config", configPath, "--port", String(grpcPort), "--metrics-port", String(metricsPort), "--identity", identity]);
    const a = { identity, process: child, metricsPort };
    running.push(a);
    await child.waitForOutput(/aggregator listening/);
    return a;
  }

  /** Waits until `a` holds the Lease and serves; returns how long that took from `sinceMs`. */
  async function takesOver(a: Aggregator, sinceMs: number, timeoutMs: number): Promise<number> {
    let tookMs = 0;
    await waitFor(`${a.identity} to hold the Lease`, async () => {
      if ((await holder()) !== a.identity) return false;
      tookMs = Date.now() - sinceMs;
      return true;
    }, timeoutMs);
    await waitFor(`${a.identity} to serve`, async () => (await leading(a)) === 1);
    return tookMs;
  }

  beforeAll(async () => {
    server = await startLocalApiServer({ users: [{ name: SERVICE_ACCOUNT }] });
    await new TestPods(server.kubeConfig(), NS).createNamespace();
    dir = mkdtempSync(join(tmpdir(), "leader-lease-"));
    copyFileSync(RBAC_YAML, join(dir, "rbac.yaml"));
    writeFileSync(join(dir, "kustomization.yaml"), `namespace: ${NS}\nresources: [rbac.yaml]\n`);
    execFileSync("kubectl", ["apply", "-k", dir, "--kubeconfig", server.writeKubeconfig()], { encoding: "utf8", timeout: 60_000 });
    leases = server.kubeConfig().makeApiClient(CoordinationV1Api);

    fleet = await startFleet([{ name: "llama-a", model: "llama-3.1-8b" }]);
    kubeconfigPath = server.writeKubeconfig(SERVICE_ACCOUNT);
    configPath = join(dir, "gateway.yaml");
    writeFileSync(configPath, stringify({
      aggregator: { host: "127.0.0.1", leaderElection: { lease: { namespace: NS, name: LEASE, durationS: DURATION_S, kubeconfig: kubeconfigPath } } },
      pools: [{ name: "llama", baseModel: "llama-3.1-8b", endpoints: [fleet.pod("llama-a").address] }],
    }));
  }, 120_000);

  afterAll(async () => {
    for (const a of running) {
      a.process.child.kill("SIGCONT");
      a.process.child.kill("SIGKILL");
    }
    await fleet?.close();
    await server?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it("elects one: the first to start creates the Lease and serves, the second stands by", async () => {
    const a = await start("agg-a");
    expect(await holder()).toBe("agg-a");
    expect((await lease()).spec?.leaseDurationSeconds).toBe(DURATION_S);
    const b = await start("agg-b");
    await b.process.waitForOutput(/standing by: Lease gateway\/llm-gateway-aggregator is held by agg-a/);
    expect(await leading(a)).toBe(1);
    expect(await leading(b)).toBe(0);
    // The holder renews: renewTime moves while it lives.
    const renewed = String((await lease()).spec?.renewTime);
    await waitFor("a renewal", async () => String((await lease()).spec?.renewTime) !== renewed);
    expect(await holder()).toBe("agg-a");
  });

  it("hands over at once when the holder is killed: its port refuses, so the Lease is not waited out", async () => {
    const [a, b] = running;
    const transitions = (await lease()).spec?.leaseTransitions ?? 0;
    const killedAt = Date.now();
    a.process.child.kill("SIGKILL");
    const tookMs = await takesOver(b, killedAt, DURATION_S * 1000);
    console.log(`[lease failover] SIGKILL of the holder -> standby holds the Lease: ${tookMs} ms (Lease duration ${DURATION_S * 1000} ms)`);
    expect(tookMs).toBeLessThan(DURATION_S * 1000);
    expect((await lease()).spec?.leaseTransitions).toBe(transitions + 1);
    expect(b.process.output()).toMatch(/leading: agg-a's port 127\.0\.0\.1:\d+ refuses connections/);
  });

  it("waits the Lease out when the holder hangs with its port open, and the woken holder stands down", async () => {
    const b = running[1];
    const c = await start("agg-c");
    await c.process.waitForOutput(/standing by/);
    const stoppedAt = Date.now();
    b.process.child.kill("SIGSTOP");
    const tookMs = await takesOver(c, stoppedAt, DURATION_S * 1000 * 3);
    console.log(`[lease failover] SIGSTOP of the holder -> standby holds the Lease: ${tookMs} ms (Lease duration ${DURATION_S * 1000} ms)`);
    // Renewed at most a quarter of the duration before the stop; the standby waited a whole duration from the last change it saw.
    expect(tookMs).toBeGreaterThanOrEqual(DURATION_S * 1000 * 0.75 - 100);
    b.process.child.kill("SIGCONT");
    await waitFor("the woken holder to stand down", async () => (await leading(b)) === 0);
    await b.process.waitForOutput(/standing by: (could not renew|Lease gateway\/llm-gateway-aggregator is now held by agg-c)/);
    expect(await holder()).toBe("agg-c");
    expect(await leading(c)).toBe(1);
  });

  it("releases the Lease on SIGTERM, so the standby takes over without waiting it out", async () => {
    const [, b, c] = running;
    const stoppedAt = Date.now();
    c.process.child.kill("SIGTERM");
    const tookMs = await takesOver(b, stoppedAt, DURATION_S * 1000);
    console.log(`[lease failover] SIGTERM of the holder -> standby holds the Lease: ${tookMs} ms`);
    expect((await c.process.exitWithin(10_000)).code).toBe(0);
    expect(c.process.output()).toContain("released Lease gateway/llm-gateway-aggregator");
    expect(tookMs).toBeLessThan(DURATION_S * 1000);
  });
}, { kubectl: true });
