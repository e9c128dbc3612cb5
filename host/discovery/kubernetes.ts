// Kubernetes discovery, like an InferencePool: a pool is the set of pods its
// label selector matches in its namespace that are Ready, have an IP and are
// not being deleted. Per pool: one list, then a watch from the list's
// resourceVersion; a watch that ends is resumed from the last version seen,
// and only a version the server no longer has (410 Gone) costs a new list.
// Errors back off (capped, jittered) and keep the last known pods: an API
// server that is down says nothing about the pods, and their scrapes decide
// whether they are healthy.
import type { CoreV1Api, KubeConfig, V1Pod, Watch } from "@kubernetes/client-node";
import { isIP } from "node:net";
import { formatHostPort, type KubernetesPoolConfig } from "../config.js";
import type { DiscoverySink, DiscoverySource, Target } from "./source.js";

export interface KubernetesPool {
  name: string;
  kubernetes: KubernetesPoolConfig;
}

export interface KubernetesDiscoveryOptions {
  /** Credentials; by default the pool's kubeconfig, else KUBECONFIG, else the in-cluster service account. */
  kubeConfig?: KubeConfig;
  log?: (line: string) => void;
}

/** First retry delay after an error, doubled per failure up to the cap; each delay is drawn from [d/2, d]. */
const BACKOFF_FIRST_MS = 500;
const BACKOFF_MAX_MS = 30_000;
/** A list that has not answered by then is abandoned and retried. */
const LIST_TIMEOUT_MS = 30_000;
/**
 * The server ends each watch after a time drawn from this range (as
 * client-go does, so many aggregators do not all reconnect at once); the
 * watch is then resumed from its last version.
 */
const WATCH_MIN_S = 300;
const WATCH_MAX_S = 600;
/** A watch still open this long after the server should have ended it is taken for a dead connection. */
const WATCH_GRACE_MS = 30_000;

/** The client takes ~0.8 s to load: only an aggregator with a Kubernetes pool pays for it. */
type Client = typeof import("@kubernetes/client-node");
const loadClient = (): Promise<Client> => import("@kubernetes/client-node");

const SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token";

/**
 * Credentials: a kubeconfig file (the pool's `kubeconfig` field), else the
 * KUBECONFIG variable, else the service account of the pod the aggregator
 * runs in. Throws when none applies, rather than guessing a cluster.
 */
export async function loadKubeConfig(file?: string): Promise<KubeConfig> {
  const kc = new (await loadClient()).KubeConfig();
  if (file) kc.loadFromFile(file);
  else if (process.env.KUBECONFIG) kc.loadFromDefault();
  else if (process.env.KUBERNETES_SERVICE_HOST) kc.loadFromCluster();
  else {
    throw new Error(
      `no Kubernetes credentials: not running in a cluster (KUBERNETES_SERVICE_HOST unset, token at ${SERVICE_ACCOUNT_TOKEN}) ` +
        "and no kubeconfig (set KUBECONFIG or the pool's kubernetes.kubeconfig)",
    );
  }
  if (!kc.getCurrentCluster()) throw new Error(`kubeconfig ${file ?? process.env.KUBECONFIG}: no current cluster`);
  return kc;
}

/** The pod as a target, or null while it must not get traffic. */
export function podTarget(pod: V1Pod, port: number): Target | null {
  const name = pod.metadata?.name;
  const ip = pod.status?.podIP;
  if (!name || !ip || isIP(ip) === 0 || pod.metadata?.deletionTimestamp) return null;
  const ready = pod.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True");
  if (!ready) return null;
  const address = formatHostPort(ip, port);
  return { ip, port, address, name, hostHeader: address };
}

function errorText(err: unknown): string {
  const e = err as { code?: unknown; statusCode?: unknown; body?: unknown; message?: string };
  const status = typeof e.code === "number" ? e.code : typeof e.statusCode === "number" ? e.statusCode : undefined;
  if (status !== undefined) return `HTTP ${status}: ${statusMessage(e.body) ?? e.message}`;
  // fetch says only "fetch failed"; the reason (connect ECONNREFUSED, a TLS error) is its cause.
  const cause = (err as { cause?: { message?: unknown; code?: unknown } }).cause;
  const reason = cause?.message || cause?.code;
  return reason ? `${e.message}: ${String(reason)}` : String(e.message ?? err);
}

/** The message of a Status body (an ApiException's own message carries the response headers too). */
function statusMessage(body: unknown): string | undefined {
  let status = body;
  if (typeof body === "string") {
    try {
      status = JSON.parse(body);
    } catch {
      return body || undefined;
    }
  }
  const message = (status as { message?: unknown } | null)?.message;
  return typeof message === "string" ? message : undefined;
}

function isGone(err: unknown): boolean {
  const e = err as { code?: unknown; statusCode?: unknown };
  return e.code === 410 || e.statusCode === 410;
}

/** Capped exponential backoff with jitter. */
class Backoff {
  private next = BACKOFF_FIRST_MS;

  delayMs(): number {
    const d = this.next;
    this.next = Math.min(this.next * 2, BACKOFF_MAX_MS);
    return d / 2 + (Math.random() * d) / 2;
  }

  reset(): void {
    this.next = BACKOFF_FIRST_MS;
  }
}

/** Resolves after `ms`, or at once when `signal` aborts. */
function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done);
  });
}

type WatchEnd = "ended" | "expired";

/** One pool's list-and-watch loop and its current pods. */
class PoolPods {
  /** Pods that may get traffic now, by name. */
  private pods = new Map<string, Target>();
  /** What the sink last heard; null before the first report. */
  private reported: Target[] | null = null;
  /** "" until a list succeeds, and again after the server says it has expired. */
  private resourceVersion = "";
  private readonly backoff = new Backoff();
  private flushQueued = false;
  private readonly path: string;
  private readonly api: CoreV1Api;
  private readonly podWatch: Watch;

  constructor(
    private readonly pool: KubernetesPool,
    private readonly client: Client,
    kc: KubeConfig,
    private readonly sink: DiscoverySink,
    private readonly log: (line: string) => void,
    private readonly stop: AbortSignal,
  ) {
    this.path = `/api/v1/namespaces/${encodeURIComponent(pool.kubernetes.namespace)}/pods`;
    this.api = kc.makeApiClient(client.CoreV1Api);
    this.podWatch = new client.Watch(kc);
  }

  /** Runs until `stop` aborts; `answered` is called once the pool has a first target set. */
  async run(answered: () => void): Promise<void> {
    while (!this.stop.aborted) {
      try {
        if (this.resourceVersion === "") await this.list();
        answered();
        if ((await this.watch()) === "expired") {
          this.resourceVersion = "";
          this.sink.event(this.pool.name, "relist", "resourceVersion expired (410 Gone)");
        }
      } catch (err) {
        if (this.stop.aborted) return;
        this.sink.event(this.pool.name, "error", errorText(err));
        // A pool whose first list fails has no pods yet: say so, so start() can finish.
        if (this.reported === null) this.flush();
        answered();
        await pause(this.backoff.delayMs(), this.stop);
      }
    }
  }

  private async list(): Promise<void> {
    const signal = AbortSignal.any([this.stop, AbortSignal.timeout(LIST_TIMEOUT_MS)]);
    const list = await this.api.listNamespacedPod(
      { namespace: this.pool.kubernetes.namespace, labelSelector: this.pool.kubernetes.selector },
      {
        middleware: [
          {
            pre: (req) => (req.setSignal(signal), new this.client.Observable(Promise.resolve(req))),
            post: (res) => new this.client.Observable(Promise.resolve(res)),
          },
        ],
        middlewareMergeStrategy: "append",
      },
    );
    const version = list.metadata?.resourceVersion;
    if (!version) throw new Error("pod list without a resourceVersion");
    this.pods = new Map();
    for (const pod of list.items) {
      const target = podTarget(pod, this.pool.kubernetes.port);
      if (target) this.pods.set(target.name, target);
    }
    this.resourceVersion = version;
    this.flush();
  }

  /** One watch from the current version; resolves when it ends cleanly or expired, rejects on errors. */
  private watch(): Promise<WatchEnd> {
    return new Promise<WatchEnd>((resolve, reject) => {
      const timeoutS = WATCH_MIN_S + Math.floor(Math.random() * (WATCH_MAX_S - WATCH_MIN_S));
      let end: WatchEnd = "ended";
      let failure: Error | null = null;
      let finished = false;
      let controller: AbortController | null = null;
      const abort = () => controller?.abort();
      const silence = setTimeout(() => {
        failure = new Error(`watch still open ${timeoutS + WATCH_GRACE_MS / 1000} s after asking the server to end it at ${timeoutS} s`);
        abort();
      }, timeoutS * 1000 + WATCH_GRACE_MS);
      this.stop.addEventListener("abort", abort);
      const done = (err: unknown) => {
        if (finished) return;
        finished = true;
        clearTimeout(silence);
        this.stop.removeEventListener("abort", abort);
        if (failure) reject(failure);
        else if (err && isGone(err)) resolve("expired");
        else if (err) reject(err);
        else resolve(end);
      };
      const onEvent = (type: string, obj: V1Pod & { code?: number; message?: string }) => {
        if (type === "ERROR") {
          // The server sends a Status and then ends the stream.
          if (obj.code === 410) end = "expired";
          else failure = new Error(`watch error: HTTP ${obj.code}: ${obj.message}`);
          return;
        }
        const version = obj.metadata?.resourceVersion;
        if (version) this.resourceVersion = version;
        if (type === "BOOKMARK") return;
        const name = obj.metadata?.name;
        if (!name) return;
        const target = type === "DELETED" ? null : podTarget(obj, this.pool.kubernetes.port);
        if (target) this.pods.set(name, target);
        else this.pods.delete(name);
        this.queueFlush();
      };
      const params = {
        labelSelector: this.pool.kubernetes.selector,
        resourceVersion: this.resourceVersion,
        allowWatchBookmarks: true,
        timeoutSeconds: timeoutS,
      };
      this.podWatch.watch(this.path, params, onEvent, done).then(
        (c) => {
          controller = c;
          if (this.stop.aborted) c.abort();
          // The stream is open: the server is back, so the next failure starts the backoff over.
          else if (!finished) this.backoff.reset();
        },
        (err) => done(err),
      );
    });
  }

  /** Events of one read arrive one by one: report the set once they are all in. */
  private queueFlush(): void {
    if (this.flushQueued) return;
    this.flushQueued = true;
    setImmediate(() => {
      this.flushQueued = false;
      if (!this.stop.aborted) this.flush();
    });
  }

  /** Reports the pool's targets when they differ from what the sink last heard. */
  private flush(): void {
    const next = [...this.pods.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    const before = this.reported ?? [];
    const key = (t: Target) => `${t.name} ${t.address}`;
    const beforeKeys = new Set(before.map(key));
    const nextKeys = new Set(next.map(key));
    if (this.reported !== null && beforeKeys.size === nextKeys.size && [...nextKeys].every((k) => beforeKeys.has(k))) return;
    const changes: string[] = [];
    for (const t of before) {
      if (nextKeys.has(key(t))) continue;
      this.sink.event(this.pool.name, "removed", key(t));
      changes.push(`-${key(t)}`);
    }
    for (const t of next) {
      if (beforeKeys.has(key(t))) continue;
      this.sink.event(this.pool.name, "added", key(t));
      changes.push(`+${key(t)}`);
    }
    this.reported = next;
    // The changes, not the whole set: a pool may have a thousand pods.
    this.log(`pool ${this.pool.name}: ${next.length} pod(s)${changes.length ? `; ${changes.join(", ")}` : ""}`);
    this.sink.targets(this.pool.name, next);
  }
}

/**
 * Discovers the pods of a pool with a `kubernetes:` block. start() rejects
 * when there are no credentials (see loadKubeConfig), so the aggregator does
 * not start without them.
 */
export function kubernetesSource(pool: KubernetesPool, opts: KubernetesDiscoveryOptions = {}): DiscoverySource {
  const log = opts.log ?? ((line: string) => console.log(`[discovery] ${line}`));
  const stop = new AbortController();
  return {
    async start(sink) {
      const client = await loadClient();
      const kc = opts.kubeConfig ?? (await loadKubeConfig(pool.kubernetes.kubeconfig));
      if (stop.signal.aborted) return;
      const pods = new PoolPods(pool, client, kc, sink, log, stop.signal);
      await new Promise<void>((answered) => {
        void pods.run(answered).finally(answered);
      });
    },
    close() {
      stop.abort();
    },
  };
}
