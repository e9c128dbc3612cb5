// The gateway config as a Kubernetes object (an InferenceGatewayConfig,
// host/kubernetes/crd.ts) instead of a file: the object's spec is the file's
// content. Each new generation of the object goes through the same reload as
// a file edit, and its outcome is written to the object's status (through the
// status subresource), so `kubectl get` and a GitOps tool see a refused edit:
// condition Accepted True (Applied) or False (Invalid: the config checks
// failed; RestartRequired: a field only a restart changes; Refused: the
// reload was refused, e.g. by Envoy), its message naming the fields, and the
// generation it judged.
import type { CustomObjectsApi, KubeConfig } from "@kubernetes/client-node";
import { customObjects, followObject } from "../kubernetes/object-watch.js";
import { ConfigError, parseGatewayConfig, type GatewayConfig } from "../config.js";
import { CONFIG_GROUP, CONFIG_KIND, CONFIG_PLURAL, CONFIG_VERSION } from "../kubernetes/crd.js";
import { fixedFieldChanges } from "./config-diff.js";
import type { ReloadResult } from "./reload.js";

export interface ConfigResourceRef {
  namespace: string;
  name: string;
}

/** `<namespace>/<name>`, as --config-resource takes it. */
export function parseConfigResourceRef(text: string): ConfigResourceRef {
  const m = /^([a-z0-9]([-a-z0-9]*[a-z0-9])?)\/([a-z0-9]([-.a-z0-9]*[a-z0-9])?)$/.exec(text);
  if (!m) throw new Error(`--config-resource: expected <namespace>/<name> of an ${CONFIG_KIND}, got ${JSON.stringify(text)}`);
  return { namespace: m[1], name: m[3] };
}

export type AcceptedReason = "Applied" | "Invalid" | "RestartRequired" | "Refused";

export interface Verdict {
  accepted: boolean;
  reason: AcceptedReason;
  message: string;
}

interface ConfigObject {
  metadata?: { generation?: number; resourceVersion?: string };
  spec?: unknown;
  status?: { observedGeneration?: number; conditions?: Array<Record<string, unknown>> };
}

export interface ConfigResourceOptions {
  kubeConfig: KubeConfig;
  ref: ConfigResourceRef;
  log: (line: string) => void;
}


/** The spec as a config; throws a ConfigError naming the fields. */
export function configFromSpec(spec: unknown, source: string): GatewayConfig {
  if (spec === null || typeof spec !== "object" || Array.isArray(spec)) throw new ConfigError(source, ["spec: expected a mapping"]);
  // JSON is YAML: the same parser and checks as the file.
  return parseGatewayConfig(JSON.stringify(spec), source);
}

/** Reads, judges and watches one InferenceGatewayConfig. */
export class ConfigResource {
  private readonly api: CustomObjectsApi;
  private readonly source: string;
  private readonly stop = new AbortController();
  /** The generation last judged, so a status write (no new generation) is not judged again. */
  private judged = -1;
  /** The config in force, to tell a restart-only change from another refusal. */
  private inForce: GatewayConfig | null = null;
  private refuse: (reason: string) => void = () => {};

  private constructor(
    api: CustomObjectsApi,
    private readonly opts: ConfigResourceOptions,
  ) {
    this.api = api;
    this.source = `${CONFIG_KIND} ${opts.ref.namespace}/${opts.ref.name}`;
  }

  static async open(opts: ConfigResourceOptions): Promise<ConfigResource> {
    return new ConfigResource((await customObjects(opts.kubeConfig)).api, opts);
  }

  private get params() {
    return { group: CONFIG_GROUP, version: CONFIG_VERSION, namespace: this.opts.ref.namespace, plural: CONFIG_PLURAL, name: this.opts.ref.name };
  }

  /** The config to start with; refused (status written, then thrown) when invalid. */
  async initial(): Promise<GatewayConfig> {
    const obj = (await this.api.getNamespacedCustomObject(this.params)) as ConfigObject;
    const generation = obj.metadata?.generation ?? 0;
    this.judged = generation;
    try {
      this.inForce = configFromSpec(obj.spec, this.source);
    } catch (err) {
      await this.writeStatus(obj, { accepted: false, reason: "Invalid", message: (err as Error).message });
      throw err;
    }
    await this.writeStatus(obj, { accepted: true, reason: "Applied", message: "in force since the aggregator started" });
    return this.inForce;
  }

  /** Follows the object until close(); each new generation is parsed and handed to `reload`, or, invalid, to `refuse`. */
  follow(reload: (config: GatewayConfig) => Promise<ReloadResult>, refuse: (reason: string) => void): void {
    this.refuse = refuse;
    void this.loop(reload);
  }

  close(): void {
    this.stop.abort();
  }

  private async loop(reload: (config: GatewayConfig) => Promise<ReloadResult>): Promise<void> {
    await followObject({
      kubeConfig: this.opts.kubeConfig,
      ref: this.params,
      seen: (obj) => {
        if (obj) void this.judge(obj, reload).catch((err) => this.opts.log(`${this.source}: ${(err as Error).message}`));
        else this.opts.log(`${this.source} does not exist (any more): the config in force stays`);
      },
      failed: (reason) => this.opts.log(`${this.source}: ${reason}`),
      signal: this.stop.signal,
    });
  }

  /** Judges a generation not judged yet: parse, reload, write the verdict. Generations are judged one at a time, in order. */
  private queue: Promise<void> = Promise.resolve();
  private judge(obj: ConfigObject, reload: (config: GatewayConfig) => Promise<ReloadResult>): Promise<void> {
    const run = this.queue.then(async () => {
      const generation = obj.metadata?.generation ?? 0;
      if (generation <= this.judged || this.stop.signal.aborted) return;
      this.judged = generation;
      let next: GatewayConfig;
      try {
        next = configFromSpec(obj.spec, this.source);
      } catch (err) {
        this.refuse((err as Error).message);
        return this.writeStatus(obj, { accepted: false, reason: "Invalid", message: (err as Error).message });
      }
      const restartOnly = this.inForce ? fixedFieldChanges(this.inForce, next).length > 0 : false;
      const result = await reload(next);
      if (result.applied) {
        this.inForce = next;
        return this.writeStatus(obj, { accepted: true, reason: "Applied", message: result.changes.length ? `applied: ${result.changes.join("; ")}` : "applied: no change" });
      }
      return this.writeStatus(obj, { accepted: false, reason: restartOnly ? "RestartRequired" : "Refused", message: result.reason });
    });
    this.queue = run.catch(() => {});
    return run;
  }

  /** Writes the verdict on `obj`'s generation; a conflict (the object changed since) is retried on the latest version. */
  private async writeStatus(obj: ConfigObject, verdict: Verdict): Promise<void> {
    const generation = obj.metadata?.generation ?? 0;
    for (let attempt = 0; attempt < 3; attempt++) {
      const latest = attempt === 0 ? obj : ((await this.api.getNamespacedCustomObject(this.params)) as ConfigObject);
      const body = { ...latest, status: statusWith(latest.status, generation, verdict) };
      try {
        await this.api.replaceNamespacedCustomObjectStatus({ ...this.params, body });
        return;
      } catch (err) {
        if ((err as { code?: number }).code !== 409) throw err;
      }
    }
    this.opts.log(`${this.source}: status not written (the object kept changing)`);
  }
}

/** The status with the Accepted condition set; its transition time changes only when its status does. */
export function statusWith(previous: ConfigObject["status"], generation: number, verdict: Verdict): NonNullable<ConfigObject["status"]> {
  const conditions = (previous?.conditions ?? []).filter((c) => c.type !== "Accepted");
  const before = previous?.conditions?.find((c) => c.type === "Accepted");
  const status = verdict.accepted ? "True" : "False";
  const lastTransitionTime = before?.status === status && typeof before.lastTransitionTime === "string" ? before.lastTransitionTime : new Date().toISOString().replace(/\.\d+Z$/, "Z");
  conditions.push({ type: "Accepted", status, reason: verdict.reason, message: verdict.message, observedGeneration: generation, lastTransitionTime });
  return { observedGeneration: generation, conditions };
}
