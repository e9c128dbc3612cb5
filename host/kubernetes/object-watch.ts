// Follows one named custom object: read it, then watch it from that version
// (by field selector on its name); a watch that ends or fails is followed by
// a fresh read, errors backing off (doubling, capped). `seen` gets the object
// as each read or event has it, or null while it does not exist.
import type { KubeConfig } from "@kubernetes/client-node";

export interface ObjectRef {
  group: string;
  version: string;
  plural: string;
  namespace: string;
  name: string;
}

export interface KubeObject {
  metadata?: { generation?: number; resourceVersion?: string };
  [field: string]: unknown;
}

export interface FollowOptions {
  kubeConfig: KubeConfig;
  ref: ObjectRef;
  seen(obj: KubeObject | null): void;
  /** A failed read or watch, before the retry. */
  failed(reason: string): void;
  signal: AbortSignal;
}

const BACKOFF_FIRST_MS = 500;
const BACKOFF_MAX_MS = 30_000;
/** The server ends each watch after this long; it is then resumed by a fresh read. */
const WATCH_S = 300;

/** The custom objects client and the object's read, for callers that also write it. */
export async function customObjects(kubeConfig: KubeConfig) {
  const client = await import("@kubernetes/client-node");
  return { client, api: kubeConfig.makeApiClient(client.CustomObjectsApi) };
}

const isNotFound = (err: unknown) => (err as { code?: number }).code === 404;

/** Runs until `signal` aborts. */
export async function followObject(opts: FollowOptions): Promise<void> {
  const { ref, signal } = opts;
  const { client, api } = await customObjects(opts.kubeConfig);
  const watch = new client.Watch(opts.kubeConfig);
  const path = `/apis/${ref.group}/${ref.version}/namespaces/${encodeURIComponent(ref.namespace)}/${ref.plural}`;
  let delay = BACKOFF_FIRST_MS;
  while (!signal.aborted) {
    try {
      let version: string | undefined;
      try {
        const obj = (await api.getNamespacedCustomObject(ref)) as KubeObject;
        version = obj.metadata?.resourceVersion;
        opts.seen(obj);
      } catch (err) {
        if (!isNotFound(err)) throw err;
        opts.seen(null);
      }
      await new Promise<void>((resolve, reject) => {
        const onEvent = (type: string, obj: KubeObject & { code?: number; message?: string }) => {
          if (type === "ERROR") reject(new Error(`watch error: HTTP ${obj.code}: ${obj.message}`));
          else if (type === "DELETED") opts.seen(null);
          else if (type === "ADDED" || type === "MODIFIED") opts.seen(obj);
        };
        const params = { fieldSelector: `metadata.name=${ref.name}`, resourceVersion: version, timeoutSeconds: WATCH_S };
        watch.watch(path, params, onEvent, (err) => (err ? reject(err) : resolve())).then((controller) => {
          delay = BACKOFF_FIRST_MS;
          if (signal.aborted) controller.abort();
          else signal.addEventListener("abort", () => controller.abort(), { once: true });
        }, reject);
      });
    } catch (err) {
      if (signal.aborted) return;
      opts.failed(`${(err as Error).message}; reading it again in ${delay} ms`);
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, BACKOFF_MAX_MS);
    }
  }
}
