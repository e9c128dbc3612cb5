// A stream's request path: reads its headers (removing client-sent
// x-gateway-* ones, learning its class, tenant and wait bound), answers
// GET /v1/models, /v1/models/{id} and /health itself, holds an inference
// request until its body is complete, routes it with the worker's Router and
// sets where Envoy sends it, or holds it in a queue, or answers with an error.
import { DataAction, HeaderAction } from "../abi/context";
import {
  BufferType, getBufferBytes, getBufferSize, getHeaderPairs, MapType, continueRequest, nowNanos, removeHeaderRaw, replaceHeader,
  sendLocalResponse, setBufferBytes, utf8,
} from "../abi/hostcalls";
import { ApiError, badRequest, bodyTooLarge, modelNotFound } from "../core/openai/errors";
import { parsePriority } from "../core/fleet/priority";
import { ApiRoute, equalsAscii, startsWithAscii } from "../core/openai/routes";
import { Router, Verdict } from "../core/scheduling/router";
import { hashBytes } from "../core/wire/hash";
import { Endpoint } from "../core/fleet/snapshot";
import { viewHealth, ViewHealth } from "../core/fleet/view";
import {
  GATEWAY_HEADER_PREFIX, HEADER_BASE_MODEL, HEADER_CLAIM_CRITICAL, HEADER_CLAIM_DEBUG, HEADER_CLAIM_TENANT, HEADER_DEBUG,
  HEADER_DECISION, HEADER_DESTINATION_ENDPOINT, HEADER_MAX_WAIT, HEADER_MODEL_NAME, HEADER_POOL, HEADER_PRIORITY, HEADER_REPLY,
  HEADER_STREAM, HEADER_TENANT,
} from "../core/wire/contract.generated";
import { claimAllows, explainsDecision, Gate, mayClaimCritical, TenantFrom } from "../core/openai/trust";
import { decimalInto, RequestHeaderWriter } from "./request-headers";
import { StreamState } from "./stream-state";
import { modelJson } from "./worker";

const POOL_HEADER = utf8(HEADER_POOL);
const MODEL_NAME_HEADER = utf8(HEADER_MODEL_NAME);
const BASE_MODEL_HEADER = utf8(HEADER_BASE_MODEL);
// The decision in words; the pool routes copy it onto the response (%REQ(...)%).
const DECISION_HEADER = utf8(HEADER_DECISION);
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

/** The request path of GatewayStream (response-path.ts), which is the class Envoy's streams are. */
export abstract class RequestPath extends StreamState {
  onRequestHeaders(headerCount: i32, endOfStream: bool): HeaderAction {
    const worker = this.worker;
    const pairs = worker.pairs;
    const raw = worker.requestPairs;
    let isPost = false;
    let isGet = false;
    let contentLength: i64 = -1;
    let pathPtr: usize = 0;
    let pathLen: i32 = 0;
    const config = worker.config;
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
            worker.stats!.spoofedHeader();
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
    const path = worker.path;
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
    if (path.route == ApiRoute.ListModels) return this.reply(200, worker.modelsJson(), worker.headersFor(200));
    if (path.route == ApiRoute.GetModel) return this.answerModel(path.modelId);
    if (path.route == ApiRoute.Health) return this.answerHealth();
    if (contentLength > worker.config.maxBodyBytes) return this.fail(bodyTooLarge(worker.config.maxBodyBytes));
    if (badMaxWait) return this.fail(badRequest("The " + HEADER_MAX_WAIT + " header must be a whole number of milliseconds", HEADER_MAX_WAIT));
    // No body at all: the router answers it, in the same words as for any body it cannot read.
    if (endOfStream) return this.decide(0) ? HeaderAction.Continue : HeaderAction.StopIteration;
    this.holding = true;
    return HeaderAction.StopIteration;
  }

  onRequestBody(bodySize: i32, endOfStream: bool): DataAction {
    if (!this.holding) return this.answered ? DataAction.StopIterationAndBuffer : DataAction.Continue;
    const limit = this.worker.config.maxBodyBytes;
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
    const limit = this.worker.config.maxBodyBytes;
    if (<i64>size > limit) return this.fail(bodyTooLarge(limit));
    return this.decide(size < 0 ? 0 : size) ? HeaderAction.Continue : HeaderAction.StopIteration;
  }

  /**
   * Routes the complete body; false after answering with an error. One
   * decision in 16 is timed (two clock reads, traffic-stats.ts); a stream sent
   * or held reads the clock once after it, where its time to first token starts.
   */
  private decide(bodySize: i32): bool {
    const stats = this.worker.stats!;
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
    const worker = this.worker;
    const router = worker.router;
    const stats = worker.stats!;
    const meta = worker.meta;
    meta.priority = this.priority;
    meta.mayClaimCritical = this.mayClaimCritical;
    meta.explain = this.explain;
    meta.holdId = this.id;
    meta.tenant = this.tenant;
    meta.maxWaitMs = this.maxWaitMs;
    meta.bytes = bodySize;
    // On failure `body` stays empty, which the router answers with a 400.
    const body = worker.scratch;
    if (bodySize > 0) getBufferBytes(BufferType.RequestBody, 0, bodySize, body);
    worker.snapshot();
    if (!router.resolve(body.ptr, body.len, this.kind, worker.view, worker.nowMs, meta)) {
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
    worker.inflight.read();
    // Others' held requests come first: the board is read while anything is held anywhere.
    if (router.board.busy || router.holds.count > 0) worker.queues.read(router);
    const verdict = router.rank(worker.inflight.table, worker.refusals);
    body.release();
    if (verdict == Verdict.Held) {
      this.queued = true;
      this.heldPriority = router.priority;
      stats.held(router.priority);
      worker.queueChanged();
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
    const worker = this.worker;
    const headers = worker.headers;
    headers.begin();
    headers.setBytes(POOL_HEADER, this.poolName!);
    headers.setBytes(MODEL_NAME_HEADER, this.modelName!);
    headers.setBytes(BASE_MODEL_HEADER, this.baseModel!);
    if (this.rewrittenLength >= 0) headers.set(CONTENT_LENGTH, changetype<usize>(worker.lengthDigits), decimalInto(worker.lengthDigits, <u32>this.rewrittenLength));
    // A stream's route bounds every silence instead (core/scheduling/deadline.ts).
    if (this.stream) headers.setBytes(STREAM_HEADER, ONE);
    if (this.deadlineMs > 0) headers.set(PER_TRY_TIMEOUT_HEADER, changetype<usize>(worker.timeoutDigits), decimalInto(worker.timeoutDigits, this.deadlineMs));
    const ranked = router.ranked;
    const primary = ranked.length > 0 ? ranked[0] : null;
    if (primary != null) {
      const tokens = router.prefillTokens;
      worker.inflight.commit(primary.addressHash, 1, tokens > 0 ? 1 : 0, tokens);
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
    worker.stats!.admit(router.priority, pool, router.target!, router.blind ? null : primary);
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
      this.worker.stats!.refuseSaturated(router.priority);
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
    const rewritten = this.worker.router.body.withModel(target);
    setBufferBytes(BufferType.RequestBody, 0, bodySize, rewritten);
    if (this.contentLength >= 0) this.rewrittenLength = rewritten.byteLength;
  }

  /** `ip:port[,ip:port...]`, best first, assembled without allocating per request. */
  private setDestination(ranked: Endpoint[], headers: RequestHeaderWriter): void {
    const worker = this.worker;
    let size = ranked.length - 1;
    for (let i = 0; i < ranked.length; i++) size += ranked[i].addressBytes.byteLength;
    if (worker.destination.byteLength < size) worker.destination = new ArrayBuffer(size * 2);
    const out = changetype<usize>(worker.destination);
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
    const snap = this.worker.snapshot();
    if (snap == null) return this.fail(modelNotFound(id));
    const model = snap.find(id);
    if (model == null) return this.fail(modelNotFound(id));
    return this.reply(200, utf8(modelJson(snap, model.name, model.pool, model.adapter)), this.worker.headersFor(200));
  }

  /** 200 while requests can be routed (degraded: blind, fail-open), 503 otherwise. */
  private answerHealth(): HeaderAction {
    const worker = this.worker;
    const snap = worker.snapshot();
    const verdict = viewHealth(snap != null, worker.viewIsStale(), worker.config.view.stalePolicy);
    const status = verdict == ViewHealth.Unavailable ? "unavailable" : verdict == ViewHealth.Degraded ? "degraded" : "ok";
    const heard = worker.view.heardMs;
    const body = '{"status":"' + status + '","snapshot_version":' + (snap == null ? "0" : snap.version.toString()) +
      ',"view_age_ms":' + (heard == 0 ? "null" : (worker.nowMs > heard ? worker.nowMs - heard : 0).toString()) + "}";
    const code = status == "unavailable" ? 503 : 200;
    return this.reply(code, utf8(body), worker.headersFor(code));
  }

  private fail(error: ApiError): HeaderAction {
    this.count(error);
    return this.reply(error.status, utf8(error.toJson()), this.worker.headersFor(error.status));
  }

  /** 429 with the computed Retry-After. */
  private failSaturated(error: ApiError, retryAfterS: u32, explanation: string): void {
    this.count(error);
    this.reply(error.status, utf8(error.toJson()), this.worker.saturatedHeaders(retryAfterS, explanation));
  }

  private count(error: ApiError): void {
    this.worker.stats!.refuse(error.code, error.status);
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
