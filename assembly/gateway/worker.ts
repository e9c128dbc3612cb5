// One Envoy worker's gateway state, shared by its root context (filter-root.ts:
// configure, tick) and every stream on it (request-path.ts, response-path.ts):
// the config, the fleet view and the shared-data cells, the router, the
// counters, and the buffers streams reuse so a request allocates little. It
// imports neither the root nor the streams, which both import it.
import { HostBytes, nowMillis, utf8 } from "../abi/hostcalls";
import { encodePairs, PairsReader } from "../abi/pairs";
import { jsonString } from "../core/openai/errors";
import { RequestEnd } from "../core/lifecycle";
import { PoolLoad } from "../core/fleet/pool-load";
import { RouteOfPath } from "../core/openai/routes";
import { RequestMeta, Router } from "../core/scheduling/router";
import { Endpoint, Snapshot } from "../core/fleet/snapshot";
import { Usage, UsageTail } from "../core/openai/usage";
import { FleetView } from "../core/scheduling/fleet-view";
import { viewIsStale } from "../core/fleet/view";
import { HEADER_DECISION } from "../core/wire/contract.generated";
import { FilterConfig } from "./config";
import { FilterMetrics } from "./metrics";
import { SharedHealth } from "./shared-health";
import { SharedInflight } from "./shared-inflight";
import { SharedLedgers } from "./shared-ledgers";
import { SharedPrefixLog } from "./shared-prefix-log";
import { SharedQueueBoard } from "./shared-queue-board";
import { SharedRefusals } from "./shared-refusals";
import { SnapshotReader } from "./shared-snapshot";
import { TrafficStats } from "./traffic-stats";
import { takeWorkerId } from "./worker-id";
import { RequestHeaderWriter } from "./request-headers";

const MAX_SPARE_TAILS = 256;

export class GatewayWorker {
  config: FilterConfig = new FilterConfig();
  view: FleetView = new FleetView();
  reader: SnapshotReader = new SnapshotReader();
  health: SharedHealth = new SharedHealth();
  inflight: SharedInflight = new SharedInflight();
  prefixLog: SharedPrefixLog = new SharedPrefixLog();
  refusals: SharedRefusals = new SharedRefusals();
  queues: SharedQueueBoard = new SharedQueueBoard();
  /** Some pool of the current snapshot scores prefixes or adapters: only then is the prefix log worth its copy per tick. */
  prefixOn: bool = false;
  router: Router = new Router(0);
  metrics: FilterMetrics | null = null;
  stats: TrafficStats | null = null;
  /** Filled per request from its headers and handed to the router. */
  meta: RequestMeta = new RequestMeta();
  /** An answer's token counts, read when its stream ends. */
  usage: Usage = new Usage();
  /** The end of the request that just ended: release, drain, blame (core/lifecycle.ts). */
  requestEnd: RequestEnd = new RequestEnd();
  ledgers: SharedLedgers = new SharedLedgers(this.inflight, this.health);
  scratch: HostBytes = new HostBytes();
  /** A request's header pairs as read, until its stream keeps them (an inference request) or lets them go. */
  requestPairs: HostBytes = new HostBytes();
  pairs: PairsReader = new PairsReader();
  /** A request's path as classified by its headers, for that callback only. */
  path: RouteOfPath = new RouteOfPath();
  /** Envoy's clock at the last tick: fine for ages and deadlines, and no host call per request. */
  nowMs: u64 = 0;
  /** The destination header's value is assembled here, the per-try timeout's and content-length's digits beside it. */
  destination: ArrayBuffer = new ArrayBuffer(256);
  timeoutDigits: ArrayBuffer = new ArrayBuffer(10);
  lengthDigits: ArrayBuffer = new ArrayBuffer(10);
  headers: RequestHeaderWriter = new RequestHeaderWriter();
  /** Answer tails no stream holds now, kept for the next answers instead of a 2 KiB buffer each. */
  private spareTails: UsageTail[] = [];
  private modelList: ArrayBuffer = new ArrayBuffer(0);
  private jsonHeaders: ArrayBuffer = encodePairs(["content-type", "application/json"]);
  private unavailableHeaders: ArrayBuffer = new ArrayBuffer(0);

  /** Sets up this worker's router, bounds and reply headers from `config`, once it is parsed without error. */
  applyConfig(): void {
    const worker = takeWorkerId();
    this.router = new Router(nowMillis() ^ (<u64>worker << 32));
    this.router.writer = worker;
    this.router.holds.maxBytes = this.config.maxQueuedBytes;
    this.router.holds.maxRequests = this.config.maxQueuedRequests;
    this.prefixLog.writer = worker;
    this.router.policy = this.config.view;
    this.health.rules = this.config.health;
    this.unavailableHeaders = encodePairs([
      "content-type", "application/json", "retry-after", this.config.view.retryAfterS.toString(),
    ]);
    if (this.metrics == null) this.metrics = new FilterMetrics();
    if (this.stats == null) this.stats = new TrafficStats();
  }

  /** A held stream's place changed outside the tick (it was queued, or its client left): the board follows at once. */
  queueChanged(): void {
    this.queues.commit(this.router, this.nowMs);
  }

  takeTail(): UsageTail {
    return this.spareTails.length > 0 ? this.spareTails.pop() : new UsageTail();
  }

  giveBackTail(tail: UsageTail): void {
    // As many as streams were reading answers at once, within a bound.
    if (this.spareTails.length >= MAX_SPARE_TAILS) return;
    tail.clear();
    this.spareTails.push(tail);
  }

  /** The current snapshot, loading one now if none has arrived yet. */
  snapshot(): Snapshot | null {
    if (this.view.current == null) this.refresh();
    return this.view.current;
  }

  modelsJson(): ArrayBuffer {
    if (this.view.current == null) this.refresh();
    return this.modelList;
  }

  viewIsStale(): bool {
    return viewIsStale(this.nowMs, this.view.heardMs, this.config.view.maxAgeMs);
  }

  headersFor(status: i32): ArrayBuffer {
    return status == 503 ? this.unavailableHeaders : this.jsonHeaders;
  }

  /** A 429's headers: its computed Retry-After, and the decision when explained. */
  saturatedHeaders(retryAfterS: u32, explanation: string): ArrayBuffer {
    const pairs = ["content-type", "application/json", "retry-after", retryAfterS.toString()];
    if (explanation.length > 0) {
      pairs.push(HEADER_DECISION);
      pairs.push(explanation);
    }
    return encodePairs(pairs);
  }

  /**
   * A routed request ended (core/lifecycle.ts): `upstream` is the pod Envoy's
   * last try went to (empty: none answered), `status` NO_RESPONSE when the
   * client left before any answer.
   */
  endRequest(
    primary: Endpoint, load: PoolLoad | null, upstream: HostBytes, status: i64, flags: u64, stream: bool, sawDone: bool, prefillTokens: i32,
  ): void {
    // The served pod's address is decoded only when Envoy moved the request: rarely.
    const served = upstream.len > 0 && !sameBytes(upstream, primary.addressBytes) ? upstream.toString() : null;
    const end = this.requestEnd;
    end.end(primary.address, primary.addressHash, served, upstream.len > 0, status, flags, stream, sawDone, prefillTokens, load, this.nowMs, this.ledgers);
    if (!end.healthChanged) return;
    this.applyHealth();
    if (end.failures > 0) this.stats!.failures(end.failures);
    if (end.saturated) this.stats!.saturated();
  }

  /** Reads the clock, the health ledger and the snapshot cell (installing a new snapshot), and swaps prefix decisions. */
  refresh(): void {
    this.nowMs = nowMillis();
    const healthChanged = this.health.refresh();
    let installed = false;
    const fresh = this.reader.poll(this.view);
    // Before a snapshot's baseline is taken: the peers' in flight counts in it.
    this.inflight.loadPeers(this.reader.peersPublished);
    const peersHealthChanged = this.health.loadPeers(this.reader.peersPublished);
    const place = this.router.place;
    place.set(this.reader.replicaIndex, this.reader.replicaCount);
    this.metrics!.place(place.index, place.count);
    if (fresh) {
      // The baseline for "sent since the scrape" is the table as it is now.
      this.inflight.read();
      installed = this.reader.load(this.view, this.inflight.table, this.health.ledger, this.router.prefixes);
    }
    if (installed) this.loadSnapshot(this.view.current!);
    else if (healthChanged || peersHealthChanged) this.applyHealth();
    if (this.prefixOn) this.prefixLog.sync(this.router);
  }

  private loadSnapshot(snap: Snapshot): void {
    this.modelList = utf8(modelListJson(snap));
    this.prefixOn = this.router.recordsPicks(snap);
    this.metrics!.installed(snap, this.nowMs, this.view.heardMs);
  }

  private applyHealth(): void {
    const snap = this.view.current;
    if (snap != null) this.health.ledger.applyTo(snap);
  }
}

/** One model as GET /v1/models lists it. */
export function modelJson(snap: Snapshot, name: string, pool: i32, adapter: string): string {
  const base = snap.pools[pool].baseModel;
  return '{"id":' + jsonString(name) + ',"object":"model","created":0,"owned_by":"llm-gateway","root":' +
    jsonString(base) + ',"parent":' + (adapter.length > 0 ? jsonString(base) : "null") + "}";
}

function modelListJson(snap: Snapshot): string {
  let out = '{"object":"list","data":[';
  for (let i = 0; i < snap.models.length; i++) {
    const m = snap.models[i];
    if (i > 0) out += ",";
    out += modelJson(snap, m.name, m.pool, m.adapter);
  }
  return out + "]}";
}

/** The host's bytes equal `b`: the served pod was the one chosen, no need to decode its address. */
function sameBytes(a: HostBytes, b: ArrayBuffer): bool {
  return a.len == b.byteLength && memory.compare(a.ptr, changetype<usize>(b), <usize>a.len) == 0;
}
