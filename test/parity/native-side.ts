// The native side of a parity run: one native router per Envoy worker. The
// native build holds the routing core, including what a worker does when it
// refreshes (FleetView: install, in-flight baselines) and the pure parts of
// the shared state; this side plays the rest exactly as the filter does it:
// - the link: each snapshot gets the next version and, with every heartbeat,
//   stamps the time the aggregator was last heard from;
// - shared data: one in-flight table and one prefix log for all workers,
//   handed to a worker's router before it uses them and taken back after;
// - a worker's refresh (GatewayWorker.refresh): on configure, on each tick,
//   and before a request while no snapshot is loaded: take the clock and
//   the heard-from time, install the published snapshot if its version is
//   new (one that does not decode is skipped) against the current in-flight
//   table, then, when a pool scores prefixes or adapters, swap decisions
//   through the prefix log; between refreshes the router sees the clock of
//   the last one;
// - the stream's end (GatewayStream.onDone): the core's RequestEnd
//   (core/lifecycle.ts) in both builds: the request leaves the in-flight
//   table whatever happened (the other workers see it once its worker
//   writes the table again: its next routed request, or the flush its next
//   tick starts with), counts toward its pool's drain rate, and the
//   pod to blame goes to the passive-health ledger. (Each worker keeps its
//   own ledger here; the filter shares one, which the scenarios' single
//   worker cannot tell apart.)
import type { NativeRouter } from "../../testing/native/router.js";
import { NativeSharedData } from "../../testing/native/shared-data.js";
import { encodeSnapshot } from "../../host/proto.js";
import { KIND_OF_PATH, type Decision, type ParityEvent, type Side } from "./events.js";

export interface NativeSideOptions {
  /** Requests may be held (each gets a hold id, as each filter stream has its context id). */
  holds?: boolean;
  /** The clock (ms) when the filter was configured. */
  startMs: number;
  /** Each worker's Router seed (GatewayWorker.applyConfig), in worker order. */
  seeds: number[];
  viewPolicy: { maxAgeMs: number; policy: "fail-open" | "reject" };
  health: { ejectAfter: number; ejectMs: number };
}

interface Published {
  version: number;
  heardMs: number;
  bytes: Uint8Array;
}

interface Worker {
  router: NativeRouter;
  seenVersion: number;
  loaded: boolean;
  /** The installed snapshot weighs a scorer that records picks (the filter then syncs the prefix log on its ticks). */
  prefixOn: boolean;
}

export class NativeSide implements Side {
  private nowMs: number;
  private published: Published | null = null;
  private readonly shared = new NativeSharedData();
  private readonly workers: Worker[];
  /** The first pod each routed, ranked request went to, and its worker. */
  /** The requests routed on a view too old to score on. */
  readonly blind = new Set<string>();
  private readonly primaries = new Map<string, { address: string; worker: number; stream: boolean; prefillTokens: number }>();
  /** Held requests by hold id: their request id, worker, and what their decision will name besides the pod. */
  private readonly held = new Map<number, { id: string; worker: number; pool: string; served: string; stream: boolean }>();
  private nextHoldId = 1;
  private releases = new Map<string, Decision>();

  constructor(routers: NativeRouter[], private readonly options: NativeSideOptions) {
    this.nowMs = options.startMs;
    this.workers = routers.map((router, i) => {
      router.reset(options.seeds[i]);
      // The board orders equal tags by writer: the filter's writer is its worker id.
      router.setWriter(i + 1);
      router.setViewPolicy(options.viewPolicy.maxAgeMs, options.viewPolicy.policy);
      router.setHealthRules(options.health);
      return { router, seenVersion: 0, loaded: false, prefixOn: false };
    });
    for (const w of this.workers) this.refresh(w);
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
        for (const w of this.workers) {
          this.refresh(w);
          this.pump(w);
        }
        return undefined;
      case "request":
        return this.route(event.worker ?? 0, event.id, event.body, KIND_OF_PATH[event.path], event.priority);
      case "done":
        this.done(event.id, event.status, event.upstream, event.broken ?? false);
        return undefined;
    }
  }

  released(): Map<string, Decision> {
    const out = this.releases;
    this.releases = new Map();
    return out;
  }

  /** The tick's part in holding (GatewayRoot.releaseHeld): releases and refusals of this worker's held requests. */
  private pump(w: Worker): void {
    for (const e of this.shared.pump(w.router)) {
      const h = this.held.get(e.id)!;
      this.held.delete(e.id);
      if ("status" in e) {
        const retryAfter = e.status === 429 ? { retryAfter: e.retryAfterS?.toString() } : {};
        this.releases.set(h.id, { routed: false, status: e.status, body: { error: e.error }, ...retryAfter });
        continue;
      }
      if (e.endpoint !== null) this.primaries.set(h.id, { address: e.endpoint, worker: h.worker, stream: h.stream, prefillTokens: e.prefillTokens });
      this.releases.set(h.id, { routed: true, pool: h.pool, destination: e.endpoint === null ? null : [e.endpoint, ...e.fallbacks], served: h.served });
    }
  }

  private refresh(w: Worker): void {
    const p = this.published;
    const heardMs = p ? p.heardMs : 0;
    if (p && (p.version !== w.seenVersion || !w.loaded)) {
      try {
        this.shared.install(w.router, p.bytes);
        w.loaded = true;
        w.seenVersion = p.version;
        // As GatewayWorker.loadSnapshot: the prefix log is shared only while a weighed scorer records picks.
        w.prefixOn = w.router.recordsPicks();
      } catch {
        // Bytes that do not decode: the filter keeps what it had and retries on its next refresh.
      }
    }
    w.router.setClock(this.nowMs, heardMs);
    if (w.prefixOn) this.shared.exchangePrefixLog(w.router);
  }

  private route(worker: number, id: string, body: string | Uint8Array, kind: "chat" | "completions" | "other", priority?: string): Decision {
    const w = this.workers[worker];
    if (!w.loaded) this.refresh(w);
    // The filter's default config lets nobody claim Critical.
    const holdId = this.options.holds ? this.nextHoldId++ : 0;
    const r = this.shared.routeOrHold(w.router, body, kind, { priority, holdId });
    if ("held" in r) {
      this.held.set(holdId, { id, worker, pool: r.pool, served: r.target, stream: r.stream });
      return { held: true };
    }
    if ("status" in r) {
      const retryAfter = r.status === 429 ? { retryAfter: r.retryAfterS?.toString() } : {};
      return { routed: false, status: r.status, body: { error: r.error }, ...retryAfter };
    }
    if (r.blind) this.blind.add(id);
    if (r.endpoint !== null) this.primaries.set(id, { address: r.endpoint, worker, stream: r.stream, prefillTokens: r.prefillTokens });
    return { routed: true, pool: r.pool, destination: r.endpoint === null ? null : [r.endpoint, ...r.fallbacks], served: r.target };
  }

  private done(id: string, status: number | undefined, upstream: string | undefined, broken: boolean): void {
    for (const [holdId, h] of this.held) {
      if (h.id !== id) continue;
      this.held.delete(holdId);
      this.shared.cancel(this.workers[h.worker].router, holdId);
      return;
    }
    const routed = this.primaries.get(id);
    this.primaries.delete(id);
    if (routed === undefined) return;
    const { router } = this.workers[routed.worker];
    // The filter takes a stream's prefill off at its answer's first bytes, which come with its end here: one change.
    this.shared.endRequest(router, {
      address: routed.address, status, upstream: upstream ?? (status === undefined ? "" : routed.address), stream: routed.stream, sawDone: !broken,
      prefillTokens: routed.prefillTokens,
    });
  }
}
