// The HTTP filter: holds request headers until the body is complete, routes
// it with the shared Router, and points Envoy's ORIGINAL_DST cluster at the
// chosen endpoint through x-gateway-destination-endpoint. Client-sent
// x-gateway-* headers are removed first, so a client can never pick a host.
//
// Per request the hot path makes four host calls: read the header pairs, read
// the body, set the destination header, bump one counter.
import { DataAction, HeaderAction, HttpContext, RootContext } from "../abi/context";
import {
  BufferType, getBufferBytes, getHeaderPairs, HostBytes, log, LogLevel, MapType, removeHeaderRaw, replaceHeader,
  sendLocalResponse, setTickPeriod, utf8, nowMillis,
} from "../abi/hostcalls";
import { encodePairs, PairsReader } from "../abi/pairs";
import { ApiError, badRequest, bodyTooLarge, jsonString, notFound } from "../core/errors";
import { ApiKind } from "../core/request";
import { Router } from "../core/router";
import { Snapshot } from "../core/snapshot";
import { FilterConfig } from "./config";
import { FilterMetrics } from "./metrics";
import { SnapshotCache } from "./shared-snapshot";

const DESTINATION_HEADER = utf8("x-gateway-destination-endpoint");
const JSON_HEADERS = encodePairs(["content-type", "application/json"]);
const DETAILS = utf8("llm_gateway");

const enum Route { Unknown = 0, Inference = 1, ListModels = 2 }

export class GatewayRoot extends RootContext {
  config: FilterConfig = new FilterConfig();
  snapshots: SnapshotCache = new SnapshotCache();
  router: Router = new Router(0);
  metrics: FilterMetrics | null = null;
  scratch: HostBytes = new HostBytes();
  pairs: PairsReader = new PairsReader();
  private modelList: ArrayBuffer = new ArrayBuffer(0);

  onConfigure(size: i32): bool {
    if (getBufferBytes(BufferType.PluginConfig, 0, size, this.scratch)) {
      this.config = FilterConfig.parse(this.scratch.ptr, this.scratch.len);
      this.scratch.release();
    }
    if (this.config.error.length > 0) log(LogLevel.Error, "llm_gateway config: " + this.config.error);
    this.router = new Router(nowMillis() ^ (<u64>this.id << 32));
    if (this.metrics == null) this.metrics = new FilterMetrics();
    setTickPeriod(this.config.refreshMs);
    this.refresh();
    return true;
  }

  onTick(): void {
    this.refresh();
  }

  createHttpContext(id: u32): HttpContext | null {
    return new GatewayStream(id, this);
  }

  /** The current snapshot, loading one now if none has arrived yet. */
  snapshot(): Snapshot | null {
    if (this.snapshots.current == null) this.refresh();
    return this.snapshots.current;
  }

  modelsJson(): ArrayBuffer {
    if (this.snapshots.current == null) this.refresh();
    return this.modelList;
  }

  private refresh(): void {
    if (!this.snapshots.refresh()) return;
    const snap = this.snapshots.current!;
    this.modelList = utf8(modelListJson(snap));
    const m = this.metrics!;
    m.count(m.snapshotUpdates);
    let endpoints = 0;
    for (let i = 0; i < snap.pools.length; i++) endpoints += snap.pools[i].endpoints.length;
    m.set(m.snapshotEndpoints, <u64>endpoints);
    m.set(m.snapshotVersion, snap.version);
  }
}

class GatewayStream extends HttpContext {
  private route: Route = Route.Unknown;
  private kind: ApiKind = ApiKind.Other;
  private answered: bool = false;

  constructor(id: u32, private root: GatewayRoot) {
    super(id);
  }

  onRequestHeaders(headerCount: i32, endOfStream: bool): HeaderAction {
    const root = this.root;
    const pairs = root.pairs;
    const raw = root.scratch;
    let isPost = false;
    let contentLength: i64 = -1;
    let pathStart: usize = 0;
    let pathLen: i32 = 0;
    if (getHeaderPairs(MapType.RequestHeaders, raw) && pairs.reset(raw.ptr, raw.len)) {
      while (pairs.next()) {
        const k = pairs.keyPtr;
        const kl = pairs.keyLen;
        if (startsWith(k, kl, "x-gateway-")) {
          removeHeaderRaw(MapType.RequestHeaders, k, kl);
          root.metrics!.count(root.metrics!.spoofedHeaders);
        } else if (equals(k, kl, ":path")) {
          pathStart = pairs.valuePtr;
          pathLen = pairs.valueLen;
          this.classify(pathStart, pathLen);
        } else if (equals(k, kl, ":method")) {
          isPost = equals(pairs.valuePtr, pairs.valueLen, "POST");
        } else if (equals(k, kl, "content-length")) {
          contentLength = parseDecimal(pairs.valuePtr, pairs.valueLen);
        }
      }
    }
    let path = "";
    if (this.route != Route.Inference) path = String.UTF8.decodeUnsafe(pathStart, <usize>pathLen);
    raw.release();

    if (this.route == Route.ListModels && !isPost) {
      this.reply(200, root.modelsJson());
      return HeaderAction.StopIteration;
    }
    if (this.route != Route.Inference || !isPost) return this.fail(notFound(path));
    if (contentLength > root.config.maxBodyBytes) return this.fail(bodyTooLarge(root.config.maxBodyBytes));
    if (endOfStream) return this.fail(badRequest("request body is required", ""));
    return HeaderAction.StopIteration;
  }

  onRequestBody(bodySize: i32, endOfStream: bool): DataAction {
    if (this.answered) return DataAction.StopIterationAndBuffer;
    const root = this.root;
    if (<i64>bodySize > root.config.maxBodyBytes) {
      this.fail(bodyTooLarge(root.config.maxBodyBytes));
      return DataAction.StopIterationAndBuffer;
    }
    if (!endOfStream) return DataAction.StopIterationAndBuffer;

    // On failure `body` stays empty, which the router answers with a 400.
    const body = root.scratch;
    getBufferBytes(BufferType.RequestBody, 0, bodySize, body);
    const endpoint = root.router.route(body.ptr, body.len, this.kind, root.snapshot());
    body.release();
    if (endpoint == null) {
      this.fail(root.router.error!);
      return DataAction.StopIterationAndBuffer;
    }
    replaceHeader(MapType.RequestHeaders, DESTINATION_HEADER, endpoint.addressBytes);
    root.metrics!.count(root.metrics!.routed);
    return DataAction.Continue;
  }

  private classify(ptr: usize, len: i32): void {
    const end = pathEnd(ptr, len);
    if (equals(ptr, end, "/v1/models")) {
      this.route = Route.ListModels;
    } else if (startsWith(ptr, end, "/v1/")) {
      this.route = Route.Inference;
      if (equals(ptr, end, "/v1/chat/completions")) this.kind = ApiKind.Chat;
      else if (equals(ptr, end, "/v1/completions")) this.kind = ApiKind.Completions;
    }
  }

  private fail(error: ApiError): HeaderAction {
    this.root.metrics!.rejected(error.status);
    this.reply(error.status, utf8(error.toJson()));
    return HeaderAction.StopIteration;
  }

  private reply(status: i32, body: ArrayBuffer): void {
    this.answered = true;
    sendLocalResponse(<u32>status, DETAILS, body, JSON_HEADERS);
  }
}

function modelListJson(snap: Snapshot): string {
  let out = '{"object":"list","data":[';
  for (let i = 0; i < snap.models.length; i++) {
    const m = snap.models[i];
    const base = snap.pools[m.pool].baseModel;
    if (i > 0) out += ",";
    out += '{"id":' + jsonString(m.name) + ',"object":"model","created":0,"owned_by":"llm-gateway","root":' +
      jsonString(base) + ',"parent":' + (m.adapter.length > 0 ? jsonString(base) : "null") + "}";
  }
  return out + "]}";
}

/** Length of a :path value without its query string. */
function pathEnd(ptr: usize, len: i32): i32 {
  for (let i = 0; i < len; i++) if (load<u8>(ptr + <usize>i) == 0x3f) return i;
  return len;
}

function equals(ptr: usize, len: i32, s: string): bool {
  return len == s.length && startsWith(ptr, len, s);
}

/** ASCII, case-sensitive: header names arrive lower-cased from Envoy. */
function startsWith(ptr: usize, len: i32, prefix: string): bool {
  if (len < prefix.length) return false;
  for (let i = 0; i < prefix.length; i++) {
    if (<i32>load<u8>(ptr + <usize>i) != prefix.charCodeAt(i)) return false;
  }
  return true;
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
