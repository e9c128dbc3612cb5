// Tests against a real kube-apiserver (testing/localkube): Pods as a kubelet-less
// cluster has them (the test sets IP and readiness through the status
// subresource), a sink that records what a discovery source reports, and a
// TCP relay that can cut the source off from the API server and let it back.
import { CoreV1Api, type KubeConfig, type V1Pod } from "@kubernetes/client-node";
import net from "node:net";
import { describe } from "vitest";
import type { DiscoveryEventKind, DiscoverySink, Target } from "../../host/discovery/source.js";
import { apiServerBinaries } from "../../testing/localkube/apiserver.js";
import { commandRuns, skipWithout } from "./requirements.js";
import { waitFor } from "./stack.js";

/**
 * `describe`, skipped with the reason when the API server is not built, or
 * kubectl is missing for a suite that runs it (failing instead under CI).
 */
export function describeWithApiServer(name: string, body: () => void, opts: { kubectl?: boolean } = {}): void {
  const why =
    apiServerBinaries() === null
      ? "kube-apiserver and etcd are not built: run scripts/kube/build-apiserver.sh (about 10 minutes cold, cached in ~/.cache/kube-local)"
      : opts.kubectl && !commandRuns("kubectl", ["version", "--client"])
        ? "kubectl is not installed (Debian: apt-get install kubernetes-client)"
        : null;
  if (skipWithout(why === null, name, why ?? "")) describe.skip(`${name} (SKIPPED: ${why})`, body);
  else describe(name, body);
}

export interface PodState {
  ip?: string;
  ready: boolean;
}

/** Pods of one namespace, created and changed the way a test needs them. */
export class TestPods {
  readonly api: CoreV1Api;

  constructor(
    kc: KubeConfig,
    readonly namespace: string,
  ) {
    this.api = kc.makeApiClient(CoreV1Api);
  }

  /** Creates the namespace itself (idempotent enough for one test file: fails if it exists). */
  async createNamespace(): Promise<void> {
    await this.api.createNamespace({ body: { metadata: { name: this.namespace } } });
  }

  /**
   * A Pod bound to a node that does not exist: nothing runs it, and deleting
   * it with a grace period leaves it in place with a deletionTimestamp, as a
   * terminating pod is until its kubelet confirms.
   */
  async create(name: string, labels: Record<string, string>, state?: PodState): Promise<V1Pod> {
    const pod = await this.api.createNamespacedPod({
      namespace: this.namespace,
      body: {
        metadata: { name, labels },
        spec: { nodeName: "no-such-node", containers: [{ name: "model-server", image: "vllm/vllm-openai:latest" }] },
      },
    });
    return state ? this.setState(name, state) : pod;
  }

  /** What a kubelet would report: the pod's IP and its Ready condition. */
  async setState(name: string, state: PodState): Promise<V1Pod> {
    const pod = await this.api.readNamespacedPod({ name, namespace: this.namespace });
    const now = new Date();
    pod.status = {
      ...pod.status,
      phase: "Running",
      podIP: state.ip,
      podIPs: state.ip ? [{ ip: state.ip }] : undefined,
      conditions: [{ type: "Ready", status: state.ready ? "True" : "False", lastTransitionTime: now }],
    };
    return this.api.replaceNamespacedPodStatus({ name, namespace: this.namespace, body: pod });
  }

  async relabel(name: string, labels: Record<string, string>): Promise<V1Pod> {
    const pod = await this.api.readNamespacedPod({ name, namespace: this.namespace });
    pod.metadata!.labels = labels;
    return this.api.replaceNamespacedPod({ name, namespace: this.namespace, body: pod });
  }

  /** Starts a graceful deletion: the pod stays, marked with a deletionTimestamp. */
  async beginDelete(name: string): Promise<V1Pod> {
    await this.api.deleteNamespacedPod({ name, namespace: this.namespace, gracePeriodSeconds: 30 });
    return this.api.readNamespacedPod({ name, namespace: this.namespace });
  }

  /** Removes the pod at once, as a kubelet's confirmation (or a force delete) does. */
  async remove(name: string): Promise<void> {
    await this.api.deleteNamespacedPod({ name, namespace: this.namespace, gracePeriodSeconds: 0 });
  }
}

export interface RecordedEvent {
  pool: string;
  kind: DiscoveryEventKind;
  detail?: string;
}

/** A DiscoverySink that keeps every report, to wait on and assert. */
export class RecordingSink implements DiscoverySink {
  readonly reports = new Map<string, Target[][]>();
  readonly events: RecordedEvent[] = [];

  targets(pool: string, targets: Target[]): void {
    const list = this.reports.get(pool) ?? [];
    list.push(targets);
    this.reports.set(pool, list);
  }

  event(pool: string, kind: DiscoveryEventKind, detail?: string): void {
    this.events.push({ pool, kind, detail });
  }

  /** The pool's latest target set, or undefined before its first report. */
  latest(pool: string): Target[] | undefined {
    return this.reports.get(pool)?.at(-1);
  }

  /** `name address` of the latest set, in the source's order (by name). */
  current(pool: string): string[] | undefined {
    return this.latest(pool)?.map((t) => `${t.name} ${t.address}`);
  }

  eventsOf(pool: string, kind: DiscoveryEventKind): RecordedEvent[] {
    return this.events.filter((e) => e.pool === pool && e.kind === kind);
  }

  /** Waits until the pool's latest set is exactly `expected` (`name address` entries, any order). */
  async until(pool: string, expected: string[], timeoutMs = 15_000): Promise<void> {
    const want = [...expected].sort().join(" | ");
    await waitFor(`pool ${pool} = [${want}] (last: [${this.current(pool)?.join(" | ")}])`, () => [...(this.current(pool) ?? [])].sort().join(" | ") === want && this.latest(pool) !== undefined, timeoutMs);
  }
}

/**
 * A TCP relay in front of the API server: `cut()` drops every connection and
 * refuses new ones (a network failure or a restarting server, as the client
 * sees it); `restore()` listens again on the same port.
 */
export class ApiRelay {
  private server: net.Server | null = null;
  private readonly sockets = new Set<net.Socket>();
  port = 0;

  constructor(private readonly target: { host: string; port: number }) {}

  /** `https://127.0.0.1:<relay port>`, for a KubeConfig's server. */
  get url(): string {
    return `https://127.0.0.1:${this.port}`;
  }

  async restore(): Promise<void> {
    if (this.server) return;
    const server = net.createServer((client) => {
      const upstream = net.connect(this.target.port, this.target.host);
      for (const s of [client, upstream]) {
        this.sockets.add(s);
        s.on("close", () => this.sockets.delete(s));
        s.on("error", () => {
          client.destroy();
          upstream.destroy();
        });
      }
      client.pipe(upstream).pipe(client);
    });
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(this.port, "127.0.0.1", () => resolve());
    });
    this.port = (server.address() as net.AddressInfo).port;
    this.server = server;
  }

  async cut(): Promise<void> {
    const server = this.server;
    this.server = null;
    for (const s of this.sockets) s.destroy();
    if (server) await new Promise<void>((r) => server.close(() => r()));
  }
}
