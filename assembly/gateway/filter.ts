// The HTTP filter. For an inference POST it holds the request until the body
// is complete (end of data, or trailers), routes it with the shared Router and
// tells Envoy where to send it: `x-gateway-pool` selects the pool's route and
// cluster, `x-gateway-destination-endpoint` lists the chosen pod and its
// fallbacks for the cluster's override_host policy, which only ever connects
// to the pool's known hosts. GET /v1/models, /v1/models/{id} and /health are
// answered here; every other request is left to Envoy's route table (404/405).
// Client-sent x-gateway-* headers are removed first (the JWT claims that
// Envoy's jwt_authn put in x-gateway-claim-* are read, then removed too).
// It also sets x-gateway-model-name (the model asked for) and
// x-gateway-base-model, so Envoy's routes can match a model; Envoy
// re-evaluates the route after the filter has set them. A request for a model
// with a canary split is sent as its chosen target, the body's "model"
// rewritten. A class (x-llm-priority) decides admission: a request its pool
// has no room for is held (the stream paused, its body in Envoy's buffer)
// until the tick releases it to the pod that has room then, or answers 429
// with Retry-After once it cannot be served within its wait budget.
//
// Per routed request the hot path makes these host calls: read the header
// pairs, read the body, read and write the shared in-flight table, set the
// routing headers (one call, request-headers.ts), and at the end read the
// response code, the response flags (unless the answer ended whole and well)
// and the upstream address to learn how the request went (passive health).
// The request's release from the in-flight table waits for this worker's next
// write of it (shared-inflight.ts). Counters are kept in Wasm memory and
// handed to Envoy on the tick (traffic-stats.ts); one decision in 16 is timed
// for the decision-time histogram (two clock reads), and a stream reads the
// clock where its time to first token starts and, at its first bytes, reads
// it again and reads and writes the in-flight table (its prefill done).
// An answer that will carry token counts (any
// answer that is not a stream, and streams that asked for
// stream_options.include_usage) costs one read per chunk of at most its last
// 2 KiB, kept in a bounded tail (core/openai/usage.ts); nothing is buffered.
// With an access log configured, its usage also goes into the stream's
// filter state at the answer's end (one call), for the log's tokens field.
import { DataAction, HeaderAction, HttpContext, RootContext, streamOf } from "../abi/context";
import {
  BufferType, getBufferBytes, getBufferSize, getHeaderPairs, getPropertyBytes, HostBytes, log, LogLevel, MapType,
  continueRequest, nowMillis, nowNanos, propertyPath, removeHeaderRaw, replaceHeader, sendLocalResponse,
  setBufferBytes, setEffectiveContext, setProperty, setTickPeriod, utf8,
} from "../abi/hostcalls";
import { freeHostBuffer } from "../abi/host-buffers";
import { encodePairs, PairsReader } from "../abi/pairs";
import { ApiError, badRequest, bodyTooLarge, jsonString, modelNotFound } from "../core/openai/errors";
import { NO_RESPONSE, RequestEnd } from "../core/lifecycle";
import { PoolLoad } from "../core/fleet/pool-load";
import { NO_PRIORITY, parsePriority } from "../core/fleet/priority";
import { ApiRoute, equalsAscii, RouteOfPath, startsWithAscii } from "../core/openai/routes";
import { ApiKind } from "../core/openai/request";
import { HoldSink, RequestMeta, Router, Verdict } from "../core/scheduling/router";
import { HeldRequest } from "../core/queueing/held-request";
import { hashBytes } from "../core/wire/hash";
import { Endpoint, ModelRoute, Pool, Snapshot } from "../core/fleet/snapshot";
import { StreamEnd, Usage, UsageTail } from "../core/openai/usage";
import { FleetView } from "../core/scheduling/fleet-view";
import { viewHealth, ViewHealth, viewIsStale } from "../core/fleet/view";
import {
  GATEWAY_HEADER_PREFIX, HEADER_BASE_MODEL, HEADER_CLAIM_CRITICAL, HEADER_CLAIM_DEBUG, HEADER_CLAIM_TENANT, HEADER_DEBUG,
  HEADER_DECISION, HEADER_DESTINATION_ENDPOINT, HEADER_MAX_WAIT, HEADER_MODEL_NAME, HEADER_POOL, HEADER_PRIORITY, HEADER_REPLY,
  HEADER_STREAM, HEADER_TENANT,
} from "../core/wire/contract.generated";
import { FilterConfig } from "./config";
import { claimAllows, explainsDecision, Gate, mayClaimCritical, TenantFrom } from "../core/openai/trust";
import { FilterMetrics } from "./metrics";
import { reportMemoryGrowth } from "./memory-gauge";
import { SharedHealth } from "./shared-health";
import { SharedInflight } from "./shared-inflight";
import { SharedLedgers } from "./shared-ledgers";
import { SharedPrefixLog } from "./shared-prefix-log";
import { SharedQueueBoard } from "./shared-queue-board";
import { SharedRefusals } from "./shared-refusals";
import { SnapshotReader } from "./shared-snapshot";
import { TrafficStats } from "./traffic-stats";
import { takeWorkerId } from "./worker-id";
import { decimalInto, RequestHeaderWriter } from "./request-headers";

const POOL_HEADER = utf8(HEADER_POOL);
const MODEL_NAME_HEADER = utf8(HEADER_MODEL_NAME);
const BASE_MODEL_HEADER = utf8(HEADER_BASE_MODEL);
// The decision in words; the pool routes copy it onto the response (%REQ(...)%).
const DECISION_HEADER = utf8(HEADER_DECISION);
// Envoy's access log reads it as %FILTER_STATE(wasm.llm_gateway_usage:PLAIN)% (host/envoy/telemetry.ts).
const USAGE_STATE = utf8("llm_gateway_usage");
const CONTENT_LENGTH = utf8("content-length");
// Set by Envoy's jwt_authn from a verified token (claim_to_headers).
const CRITICAL_CLAIM = HEADER_CLAIM_CRITICAL;
const DEBUG_CLAIM = HEADER_CLAIM_DEBUG;
const DESTINATION_HEADER = utf8(HEADER_DESTINATION_ENDPOINT);
// Streamed requests take their pool's stream route, whose per-try idle timeout cuts a stalled stream.
const STREAM_HEADER = utf8(HEADER_STREAM);
// Envoy's router reads it after the connection manager dropped any client copy.
const PER_TRY_TIMEOUT_HEADER = utf8("x-envoy-upstream-rq-per-try-timeout-ms");
// Marks the filter's own replies so Envoy's local_reply_config leaves them as they are.
const REPLY_MARKER = utf8(HEADER_REPLY);
const ONE = utf8("1");
const DETAILS = utf8("llm_gateway");
const RESPONSE_CODE = propertyPath("response.code");
const UPSTREAM_ADDRESS = propertyPath("upstream.address");
const RESPONSE_FLAGS = propertyPath("response.flags");
const MAX_SPARE_TAILS = 256;

export class GatewayRoot extends RootContext {
  config: FilterConfig = new FilterConfig();
  view: FleetView = new FleetView();
  reader: SnapshotReader = new SnapshotReader();
  health: SharedHealth = new SharedHealth();
  inflight: SharedInflight = new SharedInflight();
  prefixLog: SharedPrefixLog = new SharedPrefixLog();
  refusals: SharedRefusals = new SharedRefusals();
  queues: SharedQueueBoard = new SharedQueueBoard();
  private release: StreamRelease = new StreamRelease(this);
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

  onConfigure(size: i32): bool {
    if (getBufferBytes(BufferType.PluginConfig, 0, size, this.scratch)) {
      this.config = FilterConfig.parse(this.scratch.ptr, this.scratch.len);
      this.scratch.release();
    }
    if (this.config.error.length > 0) {
      // Refusing the configuration makes Envoy reject the filter: no traffic passes a misconfigured gateway.
      log(LogLevel.Critical, "llm_gateway config: " + this.config.error);
      return false;
    }
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
    setTickPeriod(this.config.refreshMs);
    this.refresh();
    return true;
  }

  onTick(): void {
    // Before anything reads the table: the requests that ended here since this worker last wrote it.
    this.inflight.flush();
    this.refresh();
    this.releaseHeld();
    this.metrics!.tick(this.view.current, this.nowMs, this.view.heardMs);
    this.stats!.flush();
    reportMemoryGrowth();
  }

  createHttpContext(id: u32): HttpContext | null {
    return new GatewayStream(id, this);
  }

  /**
   * The tick's part in holding, while this worker holds requests or the
   * board last showed others holding (an idle tick costs nothing): learns
   * what the other workers hold, dispatches or refuses this worker's held
   * requests as room frees, and renews its summary on the board. A worker
   * that holds nothing routes on the shared in-flight table like the others,
   * so it sees the same room; it learns of others' queues when it first
   * holds a request itself.
   */
  private releaseHeld(): void {
    const router = this.router;
    if (router.holds.count == 0 && !router.board.busy) return;
    this.queues.read(router);
    if (router.holds.count == 0 && !router.board.busy) return;
    if (router.holds.count > 0) {
      this.inflight.read();
      router.pump(this.view, this.inflight.table, this.refusals, this.release, this.nowMs);
      // Later host calls act on the root again.
      setEffectiveContext(this.id);
    }
    this.queues.commit(router, this.nowMs);
    this.metrics!.held(router.writer, router.holds.count, router.holds.bytes);
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

  private refresh(): void {
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

/** Resumes or answers the held streams the router's pump releases or refuses. */
class StreamRelease extends HoldSink {
  constructor(private root: GatewayRoot) {
    super();
  }

  dispatched(h: HeldRequest): void {
    const stream = this.stream(h.id);
    if (stream != null) stream.resume(this.root.router);
  }

  refused(h: HeldRequest): void {
    const stream = this.stream(h.id);
    if (stream != null) stream.refuseHeld(this.root.router);
  }

  /** The held stream, now the effective context for the host calls that follow; null if it is gone. */
  private stream(id: u32): GatewayStream | null {
    const s = streamOf(id);
    if (s == null || !(s instanceof GatewayStream) || !setEffectiveContext(id)) return null;
    return changetype<GatewayStream>(s);
  }
}

class GatewayStream extends HttpContext {
  /** The body an inference path carries (core/openai/routes.ts). */
  private kind: ApiKind = ApiKind.Other;
  /** Waiting for the end of the body (its last data frame or trailers). */
  private holding: bool = false;
  /** The filter answered this request itself. */
  private answered: bool = false;
  /** The pod chosen first, kept to learn how the request went. */
  private primary: Endpoint | null = null;
  /** Where the request's completion counts towards its pool's drain rate. */
  private load: PoolLoad | null = null;
  /** From the request headers: the class asked for, and what the client may claim. */
  private priority: i32 = NO_PRIORITY;
  private mayClaimCritical: bool = false;
  private explain: bool = false;
  private contentLength: i64 = -1;
  /** Where the request was sent and as which model: its answer's tokens count there. */
  private pool: Pool | null = null;
  private served: ModelRoute | null = null;
  /** The end of the answer so far, kept when the answer will carry token counts or is a stream. */
  private tail: UsageTail | null = null;
  private tokensCounted: bool = false;
  /** The answer's body reached its end here, in order (no reset, no deadline cut it). */
  private answerEnded: bool = false;
  private readsUsage: bool = false;
  /** The request asked for a stream: its answer must end with the terminal event. */
  private stream: bool = false;
  /** When it was decided (ns: a timed decision's start, else its end), for a stream sent or held, until its first answer bytes. */
  private completeNs: u64 = 0;
  /** Paused in a hold queue until the tick dispatches or refuses it. */
  private queued: bool = false;
  private heldPriority: i32 = 0;
  private tenant: u64 = 0;
  private maxWaitMs: i64 = -1;
  /** The per-try deadline computed when the body was read, set when the request is sent. */
  private deadlineMs: u32 = 0;
  /** Prompt tokens the shared table counts as this stream's prefill on `primary`, until its first answer bytes. */
  private prefillTokens: i32 = 0;
  /**
   * The request's headers as they came (host bytes, pairs.ts), kept until its
   * routing headers are set from them (request-headers.ts); 0 when none.
   */
  private pairsPtr: usize = 0;
  private pairsLen: i32 = 0;
  /** The routing headers' values, fixed when the body was read: the pool, the model asked for, its base model. */
  private poolName: ArrayBuffer | null = null;
  private modelName: ArrayBuffer | null = null;
  private baseModel: ArrayBuffer | null = null;
  /** The body's length after its model was rewritten (a canary split), else -1. */
  private rewrittenLength: i32 = -1;

  constructor(id: u32, private root: GatewayRoot) {
    super(id);
  }

  onRequestHeaders(headerCount: i32, endOfStream: bool): HeaderAction {
    const root = this.root;
    const pairs = root.pairs;
    const raw = root.requestPairs;
    let isPost = false;
    let isGet = false;
    let contentLength: i64 = -1;
    let pathPtr: usize = 0;
    let pathLen: i32 = 0;
    const config = root.config;
    let criticalClaim = false;
    let debugClaim = false;
    let debugAsked = false;
    let badMaxWait = false;
    if (getHeaderPairs(MapType.RequestHeaders, raw) && pairs.reset(raw.ptr, raw.len)) {
      while (pairs.next()) {
        const k = pairs.keyPtr;
        const kl = pairs.keyLen;
        if (startsWithAscii(k, kl, GATEWAY_HEADER_PREFIX)) {
          if (config.criticalFrom == Gate.Claim && equalsAscii(k, kl, CRITICAL_CLAIM)) {
            criticalClaim = claimAllows(pairs.valuePtr, pairs.valueLen, config.criticalClaims);
          } else if (config.debug == Gate.Claim && equalsAscii(k, kl, DEBUG_CLAIM)) {
            debugClaim = claimAllows(pairs.valuePtr, pairs.valueLen, config.debugClaims);
          } else if (config.tenantFrom == TenantFrom.Claim && equalsAscii(k, kl, HEADER_CLAIM_TENANT)) {
            this.tenant = hashBytes(pairs.valuePtr, pairs.valueLen);
          } else {
            root.stats!.spoofedHeader();
          }
          removeHeaderRaw(MapType.RequestHeaders, k, kl);
        } else if (equalsAscii(k, kl, HEADER_PRIORITY)) {
          this.priority = parsePriority(pairs.valuePtr, pairs.valueLen);
        } else if (config.tenantFrom == TenantFrom.Header && equalsAscii(k, kl, HEADER_TENANT)) {
          this.tenant = hashBytes(pairs.valuePtr, pairs.valueLen);
        } else if (equalsAscii(k, kl, HEADER_MAX_WAIT)) {
          this.maxWaitMs = parseDecimal(pairs.valuePtr, pairs.valueLen);
          if (this.maxWaitMs < 0) badMaxWait = true;
        } else if (equalsAscii(k, kl, HEADER_DEBUG)) {
          debugAsked = equalsAscii(pairs.valuePtr, pairs.valueLen, "1") || equalsAscii(pairs.valuePtr, pairs.valueLen, "true");
        } else if (equalsAscii(k, kl, ":path")) {
          pathPtr = pairs.valuePtr;
          pathLen = pairs.valueLen;
        } else if (equalsAscii(k, kl, ":method")) {
          isPost = equalsAscii(pairs.valuePtr, pairs.valueLen, "POST");
          isGet = equalsAscii(pairs.valuePtr, pairs.valueLen, "GET");
        } else if (equalsAscii(k, kl, "content-length")) {
          contentLength = parseDecimal(pairs.valuePtr, pairs.valueLen);
        }
      }
    }
    const path = root.path;
    path.classify(isPost, isGet, pathPtr, pathLen);
    // Only a request the router will place needs its headers again: it keeps them.
    if (path.route == ApiRoute.Inference) {
      this.kind = path.kind;
      this.pairsPtr = raw.ptr;
      this.pairsLen = raw.len;
      raw.handOver();
    } else {
      raw.release();
    }
    this.contentLength = contentLength;
    this.mayClaimCritical = mayClaimCritical(config.criticalFrom, criticalClaim);
    this.explain = explainsDecision(config.debug, debugAsked, debugClaim);

    if (path.route == ApiRoute.Other) return HeaderAction.Continue;
    if (path.route == ApiRoute.ListModels) return this.reply(200, root.modelsJson(), root.headersFor(200));
    if (path.route == ApiRoute.GetModel) return this.answerModel(path.modelId);
    if (path.route == ApiRoute.Health) return this.answerHealth();
    if (contentLength > root.config.maxBodyBytes) return this.fail(bodyTooLarge(root.config.maxBodyBytes));
    if (badMaxWait) return this.fail(badRequest("The " + HEADER_MAX_WAIT + " header must be a whole number of milliseconds", HEADER_MAX_WAIT));
    // No body at all: the router answers it, in the same words as for any body it cannot read.
    if (endOfStream) return this.decide(0) ? HeaderAction.Continue : HeaderAction.StopIteration;
    this.holding = true;
    return HeaderAction.StopIteration;
  }

  onRequestBody(bodySize: i32, endOfStream: bool): DataAction {
    if (!this.holding) return this.answered ? DataAction.StopIterationAndBuffer : DataAction.Continue;
    const limit = this.root.config.maxBodyBytes;
    if (<i64>bodySize > limit) {
      this.fail(bodyTooLarge(limit));
      return DataAction.StopIterationAndBuffer;
    }
    if (!endOfStream) return DataAction.StopIterationAndBuffer;
    return this.decide(bodySize) ? DataAction.Continue : DataAction.StopIterationAndBuffer;
  }

  /** A body followed by trailers (HTTP/2, chunked with trailers) ends here. */
  onRequestTrailers(trailerCount: i32): HeaderAction {
    if (!this.holding) return this.answered ? HeaderAction.StopIteration : HeaderAction.Continue;
    const size = getBufferSize(BufferType.RequestBody);
    const limit = this.root.config.maxBodyBytes;
    if (<i64>size > limit) return this.fail(bodyTooLarge(limit));
    return this.decide(size < 0 ? 0 : size) ? HeaderAction.Continue : HeaderAction.StopIteration;
  }

  /**
   * Keeps the last bytes of an answer that will carry token counts, or of a
   * stream (whether it ends with its terminal event); the chunk itself passes
   * on untouched.
   */
  onResponseBody(bodySize: i32, endOfStream: bool): DataAction {
    if (this.prefillTokens > 0 && bodySize > 0) this.prefilled();
    if (this.completeNs > 0 && this.stream && bodySize > 0) this.firstBytes();
    if ((this.readsUsage || this.stream) && bodySize > 0) {
      // A stream's tail is kept whole even without usage: its last event may be an error.
      const wanted = UsageTail.wanted(bodySize);
      const bytes = this.root.scratch;
      if (getBufferBytes(BufferType.ResponseBody, bodySize - wanted, wanted, bytes)) {
        if (this.tail == null) this.tail = this.root.takeTail();
        this.tail!.push(bytes.ptr, bytes.len);
      }
      bytes.release();
    }
    // Before the stream completes, so Envoy's access log sees the filter state.
    if (endOfStream) {
      this.answerEnded = true;
      this.countTokens();
    }
    return DataAction.Continue;
  }

  onDone(): void {
    // A request whose client left before it was sent still holds its headers.
    this.releasePairs();
    if (this.queued) {
      // The client left while held: its place goes at once.
      this.queued = false;
      const root = this.root;
      if (root.router.cancel(this.id)) {
        root.stats!.abandon(this.heldPriority);
        root.queueChanged();
      }
      return;
    }
    this.countTokens();
    const root = this.root;
    const tail = this.tail;
    // An error event before [DONE] ends a 200 stream that failed: a broken answer, the pod's failure.
    const ending = this.stream && tail != null ? tail!.streamEnd(this.kind == ApiKind.Responses) : StreamEnd.Broken;
    if (ending == StreamEnd.Failed && this.pool != null && this.served != null) root.stats!.streamError(this.pool!, this.served!);
    const sawDone = ending == StreamEnd.Whole;
    if (tail != null) {
      this.tail = null;
      root.giveBackTail(tail);
    }
    const primary = this.primary;
    if (primary == null) return;
    const bytes = root.scratch;
    let status: i64 = NO_RESPONSE;
    let flags: u64 = 0;
    if (getPropertyBytes(RESPONSE_CODE, bytes) && bytes.len == 8) {
      status = load<i64>(bytes.ptr);
      // Envoy's flags tell of an answer cut short (core/fleet/outcome.ts); one that ended whole and well has none to tell.
      const whole = this.answerEnded && status >= 200 && status < 300 && (!this.stream || sawDone);
      if (!whole && getPropertyBytes(RESPONSE_FLAGS, bytes) && bytes.len == 8) flags = load<u64>(bytes.ptr);
      // No upstream: Envoy answered itself (e.g. a model route's rate limit), no pod did.
      if (!getPropertyBytes(UPSTREAM_ADDRESS, bytes)) bytes.release();
    } else {
      bytes.release();
    }
    root.endRequest(primary, this.load, bytes, status, flags, this.stream, sawDone, this.prefillTokens);
    bytes.release();
  }

  private releasePairs(): void {
    if (this.pairsPtr != 0) freeHostBuffer(this.pairsPtr);
    this.pairsPtr = 0;
    this.pairsLen = 0;
  }

  /** A stream's first answer bytes: its time to first token, counted from its decision (holding included). */
  private firstBytes(): void {
    const nowNs = nowNanos();
    const startNs = this.completeNs;
    this.completeNs = 0;
    if (this.pool != null && this.served != null) this.root.stats!.firstToken(this.pool!, this.served!, nowNs > startNs ? (nowNs - startNs) / 1000 : 0);
  }

  /** The stream's first bytes: the pod has prefilled its prompt, which no longer counts as work ahead there. */
  private prefilled(): void {
    const tokens = this.prefillTokens;
    this.prefillTokens = 0;
    this.root.inflight.add(this.primary!.addressHash, 0, -1, -tokens);
  }

  /**
   * The answer's usage, if it had one, into the pool's and model's token
   * counters and, when the access log wants it, the stream's filter state
   * (one host call); once, at the answer's end or when the stream is done.
   */
  private countTokens(): void {
    const tail = this.tail;
    if (tail == null || !this.readsUsage || this.tokensCounted) return;
    this.tokensCounted = true;
    const usage = this.root.usage;
    if (!tail.find(usage)) return;
    this.root.stats!.tokens(this.pool!, this.served!, usage);
    if (this.root.config.usageToFilterState) {
      setProperty(USAGE_STATE, utf8(`{"prompt_tokens":${usage.promptTokens},"completion_tokens":${usage.completionTokens}}`));
    }
  }

  /**
   * Routes the complete body; false after answering with an error. One
   * decision in 16 is timed (two clock reads, traffic-stats.ts); a stream sent
   * or held reads the clock once after it, where its time to first token starts.
   */
  private decide(bodySize: i32): bool {
    const stats = this.root.stats!;
    const timed = stats.timesDecision();
    const startNs = timed ? nowNanos() : 0;
    const routed = this.routeBody(bodySize);
    // A local reply (a refusal) has no first token; a held request's counts from its decision, holding included.
    const waitsForFirstToken = (routed || this.queued) && this.stream;
    if (!timed && !waitsForFirstToken) return routed;
    const endNs = nowNanos();
    if (timed) stats.decisionTook(endNs > startNs ? (endNs - startNs) / 1000 : 0);
    if (waitsForFirstToken) this.completeNs = timed ? startNs : endNs;
    return routed;
  }

  private routeBody(bodySize: i32): bool {
    this.holding = false;
    const root = this.root;
    const router = root.router;
    const stats = root.stats!;
    const meta = root.meta;
    meta.priority = this.priority;
    meta.mayClaimCritical = this.mayClaimCritical;
    meta.explain = this.explain;
    meta.holdId = this.id;
    meta.tenant = this.tenant;
    meta.maxWaitMs = this.maxWaitMs;
    meta.bytes = bodySize;
    // On failure `body` stays empty, which the router answers with a 400.
    const body = root.scratch;
    if (bodySize > 0) getBufferBytes(BufferType.RequestBody, 0, bodySize, body);
    root.snapshot();
    if (!router.resolve(body.ptr, body.len, this.kind, root.view, root.nowMs, meta)) {
      body.release();
      this.fail(router.error!);
      return false;
    }
    const pool = router.pool!;
    this.poolName = pool.nameBytes;
    this.modelName = router.requested!.nameBytes;
    this.baseModel = pool.baseModelBytes;
    if (router.split != null) this.rewriteModel(router.target!.name, body.len);
    if (router.downgraded) stats.downgrade();
    if (router.split != null) stats.split(router.requested!, router.split!);
    this.pool = pool;
    this.served = router.target;
    // Streams carry usage only when asked to; every other answer ends with it.
    this.stream = router.body.stream;
    this.readsUsage = !this.stream || router.body.includeUsage;
    this.deadlineMs = router.deadlineMs;
    // The body stays readable until ranked: the prefix keys hash the prompt in place.
    root.inflight.read();
    // Others' held requests come first: the board is read while anything is held anywhere.
    if (router.board.busy || router.holds.count > 0) root.queues.read(router);
    const verdict = router.rank(root.inflight.table, root.refusals);
    body.release();
    if (verdict == Verdict.Held) {
      this.queued = true;
      this.heldPriority = router.priority;
      stats.held(router.priority);
      root.queueChanged();
      return false;
    }
    if (verdict == Verdict.Refused) {
      stats.refuseSaturated(router.priority);
      this.failSaturated(router.error!, router.retryAfterS, router.explanation);
      return false;
    }
    this.send(router);
    if (router.retried) stats.retryAdmitted(router.priority);
    return true;
  }

  /** Sets where the request goes, as the router just chose (now, or on the tick that released it), and counts it. */
  send(router: Router): void {
    const root = this.root;
    const headers = root.headers;
    headers.begin();
    headers.setBytes(POOL_HEADER, this.poolName!);
    headers.setBytes(MODEL_NAME_HEADER, this.modelName!);
    headers.setBytes(BASE_MODEL_HEADER, this.baseModel!);
    if (this.rewrittenLength >= 0) headers.set(CONTENT_LENGTH, changetype<usize>(root.lengthDigits), decimalInto(root.lengthDigits, <u32>this.rewrittenLength));
    // A stream's route bounds every silence instead (core/scheduling/deadline.ts).
    if (this.stream) headers.setBytes(STREAM_HEADER, ONE);
    if (this.deadlineMs > 0) headers.set(PER_TRY_TIMEOUT_HEADER, changetype<usize>(root.timeoutDigits), decimalInto(root.timeoutDigits, this.deadlineMs));
    const ranked = router.ranked;
    const primary = ranked.length > 0 ? ranked[0] : null;
    if (primary != null) {
      const tokens = router.prefillTokens;
      root.inflight.commit(primary.addressHash, 1, tokens > 0 ? 1 : 0, tokens);
      this.prefillTokens = tokens;
      this.setDestination(ranked, headers);
    }
    if (router.explanation.length > 0) headers.setBytes(DECISION_HEADER, utf8(router.explanation));
    headers.write(this.pairsPtr, this.pairsLen);
    this.releasePairs();
    // A held request is placed on the snapshot of its release: its pool's and model's objects may be newer.
    const pool = router.pool!;
    this.pool = pool;
    this.served = router.target;
    this.primary = primary;
    this.load = pool.load;
    root.stats!.admit(router.priority, pool, router.target!, router.blind ? null : primary);
  }

  /** Released from its hold queue by the tick: sent on now. */
  resume(router: Router): void {
    this.queued = false;
    this.send(router);
    continueRequest();
  }

  /** Refused from its hold queue by the tick (its wait ran past its budget, or its pool went away). */
  refuseHeld(router: Router): void {
    this.queued = false;
    this.readsUsage = false;
    this.stream = false;
    const error = router.error!;
    if (error.status == 429) {
      this.root.stats!.refuseSaturated(router.priority);
      this.failSaturated(error, router.retryAfterS, router.explanation);
    } else {
      this.fail(error);
    }
  }

  /**
   * Sends the body with `model` set to the canary's target (the pod must read
   * what the gateway chose), and its content-length to match.
   */
  private rewriteModel(target: string, bodySize: i32): void {
    const rewritten = this.root.router.body.withModel(target);
    setBufferBytes(BufferType.RequestBody, 0, bodySize, rewritten);
    if (this.contentLength >= 0) this.rewrittenLength = rewritten.byteLength;
  }

  /** `ip:port[,ip:port...]`, best first, assembled without allocating per request. */
  private setDestination(ranked: Endpoint[], headers: RequestHeaderWriter): void {
    const root = this.root;
    let size = ranked.length - 1;
    for (let i = 0; i < ranked.length; i++) size += ranked[i].addressBytes.byteLength;
    if (root.destination.byteLength < size) root.destination = new ArrayBuffer(size * 2);
    const out = changetype<usize>(root.destination);
    let pos: usize = 0;
    for (let i = 0; i < ranked.length; i++) {
      if (i > 0) store<u8>(out + pos++, 0x2c);
      const a = ranked[i].addressBytes;
      memory.copy(out + pos, changetype<usize>(a), <usize>a.byteLength);
      pos += <usize>a.byteLength;
    }
    headers.set(DESTINATION_HEADER, out, <i32>pos);
  }

  private answerModel(id: string): HeaderAction {
    const snap = this.root.snapshot();
    if (snap == null) return this.fail(modelNotFound(id));
    const model = snap.find(id);
    if (model == null) return this.fail(modelNotFound(id));
    return this.reply(200, utf8(modelJson(snap, model.name, model.pool, model.adapter)), this.root.headersFor(200));
  }

  /** 200 while requests can be routed (degraded: blind, fail-open), 503 otherwise. */
  private answerHealth(): HeaderAction {
    const root = this.root;
    const snap = root.snapshot();
    const verdict = viewHealth(snap != null, root.viewIsStale(), root.config.view.stalePolicy);
    const status = verdict == ViewHealth.Unavailable ? "unavailable" : verdict == ViewHealth.Degraded ? "degraded" : "ok";
    const heard = root.view.heardMs;
    const body = '{"status":"' + status + '","snapshot_version":' + (snap == null ? "0" : snap.version.toString()) +
      ',"view_age_ms":' + (heard == 0 ? "null" : (root.nowMs > heard ? root.nowMs - heard : 0).toString()) + "}";
    const code = status == "unavailable" ? 503 : 200;
    return this.reply(code, utf8(body), root.headersFor(code));
  }

  private fail(error: ApiError): HeaderAction {
    this.count(error);
    return this.reply(error.status, utf8(error.toJson()), this.root.headersFor(error.status));
  }

  /** 429 with the computed Retry-After. */
  private failSaturated(error: ApiError, retryAfterS: u32, explanation: string): void {
    this.count(error);
    this.reply(error.status, utf8(error.toJson()), this.root.saturatedHeaders(retryAfterS, explanation));
  }

  private count(error: ApiError): void {
    this.root.stats!.refuse(error.code, error.status);
  }

  private reply(status: i32, body: ArrayBuffer, headers: ArrayBuffer): HeaderAction {
    this.holding = false;
    this.releasePairs();
    this.answered = true;
    replaceHeader(MapType.RequestHeaders, REPLY_MARKER, ONE);
    sendLocalResponse(<u32>status, DETAILS, body, headers);
    return HeaderAction.StopIteration;
  }
}

function modelJson(snap: Snapshot, name: string, pool: i32, adapter: string): string {
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

/** Length of a :path value without its query string. */
function sameBytes(a: HostBytes, b: ArrayBuffer): bool {
  return a.len == b.byteLength && memory.compare(a.ptr, changetype<usize>(b), <usize>a.len) == 0;
}

/** A non-negative decimal, or -1 if the value is not one. */
function parseDecimal(ptr: usize, len: i32): i64 {
  if (len == 0 || len > 18) return len > 18 ? i64.MAX_VALUE : -1;
  let v: i64 = 0;
  for (let i = 0; i < len; i++) {
    const c = load<u8>(ptr + <usize>i);
    if (c < 0x30 || c > 0x39) return -1;
    v = v * 10 + <i64>(c - 0x30);
  }
  return v;
}
