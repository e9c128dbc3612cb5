// The native side of a parity run. The native build holds only the routing
// core, so this side also plays what still lives in assembly/gateway around
// it, exactly as the filter does it:
// - the link: each snapshot gets the next version and, with every heartbeat,
//   stamps the time the aggregator was last heard from;
// - the worker's refresh (GatewayRoot.refresh, SnapshotCache.refresh): on
//   configure, on each tick, and before a request while no snapshot is
//   loaded, take the clock and the heard-from time, and load the published
//   snapshot if its version is new (one that does not decode is skipped);
//   between refreshes the router sees the clock of the last one;
// - the stream's end (GatewayStream.onDone): the request leaves the in-flight
//   table whatever happened;
// - passive health (GatewayRoot.recordOutcome): when a routed stream ends
//   with a response code, a 5xx or a move off the first pod is a failure of
//   that pod (and a 5xx from the pod that answered instead is one of that
//   pod too); otherwise a success clears the pod's failures.
import type { NativeRouter } from "../../host/native/router.js";
import { encodeSnapshot } from "../../host/proto.js";
import { KIND_OF_PATH, type Decision, type ParityEvent, type Side } from "./events.js";

export interface NativeSideOptions {
  /** The clock (ms) when the filter was configured. */
  startMs: number;
  /** The filter's Router seed (GatewayRoot.onConfigure). */
  seed: number;
  viewPolicy: { maxAgeMs: number; policy: "fail-open" | "reject" };
  health: { ejectAfter: number; ejectMs: number };
}

interface Published {
  version: number;
  heardMs: number;
  bytes: Uint8Array;
}

export class NativeSide implements Side {
  private nowMs: number;
  private heardMs = 0;
  private published: Published | null = null;
  private seenVersion = 0;
  private loaded = false;
  /** The first pod each routed, ranked request went to. */
  private readonly primaries = new Map<string, string>();

  constructor(private readonly router: NativeRouter, private readonly options: NativeSideOptions) {
    this.nowMs = options.startMs;
    router.reset(options.seed);
    router.setViewPolicy(options.viewPolicy.maxAgeMs, options.viewPolicy.policy);
    this.refresh();
  }

  apply(event: ParityEvent): Decision | undefined {
    switch (event.type) {
      case "snapshot": {
        const bytes = event.snapshot instanceof Uint8Array ? event.snapshot : encodeSnapshot(event.snapshot);
        this.published = { version: (this.published?.version ?? 0) + 1, heardMs: this.nowMs, bytes };
        return undefined;
      }
      case "heartbeat":
        if (this.published) this.published.heardMs = this.nowMs;
        return undefined;
      case "advance":
        this.nowMs += event.ms;
        return undefined;
      case "tick":
        this.refresh();
        return undefined;
      case "request":
        return this.route(event.id, event.body, KIND_OF_PATH[event.path]);
      case "done":
        this.done(event.id, event.status, event.upstream);
        return undefined;
    }
  }

  private refresh(): void {
    const p = this.published;
    if (p) {
      this.heardMs = p.heardMs;
      if (p.version !== this.seenVersion || !this.loaded) {
        try {
          this.router.setSnapshot(p.bytes);
          this.loaded = true;
          this.seenVersion = p.version;
        } catch {
          // Bytes that do not decode: the filter keeps what it had and retries on its next refresh.
        }
      }
    }
    this.router.setClock(this.nowMs, this.heardMs);
  }

  private route(id: string, body: string | Uint8Array, kind: "chat" | "completions" | "other"): Decision {
    if (!this.loaded) this.refresh();
    const r = this.router.route(body, kind);
    if ("status" in r) return { routed: false, status: r.status, body: { error: r.error } };
    if (r.endpoint !== null) this.primaries.set(id, r.endpoint);
    return { routed: true, pool: r.pool, destination: r.endpoint === null ? null : [r.endpoint, ...r.fallbacks] };
  }

  private done(id: string, status: number | undefined, upstream: string | undefined): void {
    const primary = this.primaries.get(id);
    this.primaries.delete(id);
    if (primary === undefined) return;
    this.router.release(primary);
    if (status === undefined) return;
    const rules = this.options.health;
    const failed = status >= 500;
    if (upstream !== undefined && upstream !== primary) {
      this.router.recordOutcome(primary, true, rules);
      if (failed) this.router.recordOutcome(upstream, true, rules);
    } else {
      this.router.recordOutcome(primary, failed, rules);
    }
  }
}
