// One HTTP stream through the plugin, driven the way Envoy's Wasm filter
// (extensions/common/wasm/context.cc) drives it on the request path:
// - request headers are the plugin's to read and edit from
//   proxy_on_request_headers until a callback lets them go (Continue);
// - a body callback that answers StopIterationAndBuffer makes Envoy keep the
//   chunk, so the next callback sees everything so far and its size;
// - after proxy_send_local_response the filter chain stops: no further
//   request callbacks;
// - the answer passes in data frames (proxy_on_response_body), each readable
//   as the response body while its callback runs (the filter never holds
//   them here);
// - at the end Envoy runs access logs (proxy_on_log), then destroys the
//   filter (proxy_on_done, proxy_on_delete), with the response code and the
//   upstream address readable as properties.
import { DataAction, HeaderAction, MapType } from "./abi.js";
import type { CallContext, LocalResponse, RootContext } from "./contexts.js";
import { HeaderMap } from "./header-map.js";
import type { Pair } from "./pairs.js";

export interface Dispatcher {
  /** Runs an exported callback for `ctx`; undefined if the module does not export it. */
  dispatch(name: string, ctx: CallContext, args: number[]): number | undefined;
}

export type Headers = readonly Pair[] | Readonly<Record<string, string>>;

export interface RequestSpec {
  headers: Headers;
  /** No body (or an empty one) ends the stream with the headers, as Envoy does for Content-Length: 0. */
  body?: string | Uint8Array;
  /** Deliver the body in this many data frames (default 1). */
  chunks?: number;
  /** Ends the stream with trailers after the body. */
  trailers?: Headers;
}

/** How the stream ended, as Envoy's stream info tells the plugin in proxy_on_done. */
export interface StreamEnd {
  /** The response code; defaults to the local reply's, absent if the client left before any answer. */
  responseCode?: number;
  /** The upstream host that served the request, "ip:port". */
  upstreamAddress?: string;
}

type Phase = "new" | "open" | "ended" | "finished";

export class HttpStream implements CallContext {
  /** The request headers as they stand now: what Envoy sends upstream once the plugin continues. */
  requestHeaders = new HeaderMap();
  requestTrailers: HeaderMap | null = null;
  /** Stream properties for proxy_get_property by dotted path, e.g. "upstream.address". */
  readonly properties = new Map<string, Uint8Array>();
  /** What the filter set with proxy_set_property, by path (Envoy keeps it under "wasm." + path). */
  readonly filterState = new Map<string, Uint8Array>();
  readonly localResponses: LocalResponse[] = [];
  private headersHeld = false;
  private trailersHeld = false;
  private body: Uint8Array = new Uint8Array(0);
  /** The body Envoy sent upstream, as the plugin left it when it let the request go. */
  forwardedBody: Uint8Array = new Uint8Array(0);
  private buffering = false;
  private responseChunk: Uint8Array = new Uint8Array(0);
  private phase: Phase = "new";
  /** The plugin let the whole request go: its last callback answered Continue, or it continued the stream later. */
  private letGo = false;

  constructor(
    private readonly vm: Dispatcher,
    readonly id: number,
    readonly root: RootContext,
  ) {}

  /** The local reply the plugin sent, if any. */
  get localResponse(): LocalResponse | undefined {
    return this.localResponses[0];
  }

  /** Headers, then the body in data frames, then trailers; stops early once the plugin answers locally. */
  send(spec: RequestSpec): this {
    const body = typeof spec.body === "string" ? Buffer.from(spec.body) : spec.body ?? new Uint8Array(0);
    const trailers = spec.trailers;
    this.sendHeaders(spec.headers, body.length === 0 && trailers === undefined);
    const chunks = Math.max(1, Math.min(spec.chunks ?? 1, body.length));
    const step = Math.ceil(body.length / chunks);
    for (let start = 0; start < body.length && !this.answered; start += step) {
      const end = Math.min(start + step, body.length);
      this.sendBody(body.subarray(start, end), end === body.length && trailers === undefined);
    }
    if (trailers !== undefined && !this.answered) this.sendTrailers(trailers);
    return this;
  }

  sendHeaders(headers: Headers, endOfStream: boolean): number {
    this.expect("new");
    this.requestHeaders = new HeaderMap(pairsOf(headers));
    this.headersHeld = true;
    const action = this.run("proxy_on_request_headers", [this.requestHeaders.size, endOfStream ? 1 : 0]) ?? HeaderAction.Continue;
    if (action === HeaderAction.Continue) this.headersHeld = false;
    if (endOfStream && action === HeaderAction.Continue) this.letGo = true;
    this.phase = endOfStream ? "ended" : "open";
    return action;
  }

  sendBody(chunk: Uint8Array, endOfStream: boolean): number {
    this.expect("open");
    this.body = this.buffering ? concat(this.body, chunk) : chunk.slice();
    const action = this.run("proxy_on_request_body", [this.body.length, endOfStream ? 1 : 0]) ?? DataAction.Continue;
    this.buffering = action === DataAction.StopIterationAndBuffer;
    if (!this.buffering) {
      this.forwardedBody = concat(this.forwardedBody, this.body);
      this.body = new Uint8Array(0);
    }
    if (endOfStream) this.phase = "ended";
    if (endOfStream && action === DataAction.Continue) this.letGo = true;
    return action;
  }

  sendTrailers(trailers: Headers): number {
    this.expect("open");
    this.requestTrailers = new HeaderMap(pairsOf(trailers));
    this.trailersHeld = true;
    const action = this.run("proxy_on_request_trailers", [this.requestTrailers.size]) ?? HeaderAction.Continue;
    if (action === HeaderAction.Continue) {
      this.trailersHeld = false;
      this.forwardedBody = concat(this.forwardedBody, this.body);
      this.letGo = true;
    }
    this.phase = "ended";
    return action;
  }

  /** The upstream's answer, in data frames; the last one ends the stream. */
  respond(chunks: Array<string | Uint8Array>): void {
    if (this.answered) throw new Error(`stream ${this.id} was answered locally: no upstream answer passes the plugin`);
    if (this.phase !== "ended") throw new Error(`stream ${this.id} is in phase '${this.phase}': the request must be complete before the answer`);
    chunks.forEach((chunk, i) => {
      this.responseChunk = typeof chunk === "string" ? Buffer.from(chunk) : chunk;
      this.run("proxy_on_response_body", [this.responseChunk.length, i === chunks.length - 1 ? 1 : 0]);
    });
    this.responseChunk = new Uint8Array(0);
  }

  /** The stream is over: proxy_on_log, proxy_on_done, proxy_on_delete. */
  finish(end: StreamEnd = {}): void {
    if (this.phase === "finished") throw new Error(`stream ${this.id} finished twice`);
    const code = end.responseCode ?? this.localResponse?.status;
    if (code !== undefined) this.properties.set("response.code", int64Bytes(code));
    if (end.upstreamAddress !== undefined) this.properties.set("upstream.address", Buffer.from(end.upstreamAddress));
    this.phase = "finished";
    this.vm.dispatch("proxy_on_log", this, [this.id]);
    this.vm.dispatch("proxy_on_done", this, [this.id]);
    this.vm.dispatch("proxy_on_delete", this, [this.id]);
  }

  get answered(): boolean {
    return this.localResponses.length > 0;
  }

  /** proxy_on_delete has run: the context no longer exists. */
  get deleted(): boolean {
    return this.phase === "finished";
  }

  /** The whole request went on upstream: nothing of it is held by the plugin any more, and it was not answered locally. */
  get released(): boolean {
    return this.letGo && !this.answered;
  }

  /** proxy_continue_stream: a paused request goes on with what Envoy buffered, as the plugin left its headers. */
  continueRequest(): boolean {
    if (this.phase === "finished" || this.answered) return false;
    this.letGo = true;
    this.headersHeld = false;
    this.trailersHeld = false;
    if (this.buffering) {
      this.forwardedBody = concat(this.forwardedBody, this.body);
      this.body = new Uint8Array(0);
      this.buffering = false;
    }
    return true;
  }

  headerMap(type: number): HeaderMap | null {
    if (type === MapType.HttpRequestHeaders) return this.headersHeld ? this.requestHeaders : null;
    if (type === MapType.HttpRequestTrailers) return this.trailersHeld ? this.requestTrailers : null;
    // Only the request path is driven: Envoy offers response maps only in response callbacks.
    return null;
  }

  requestBody(): Uint8Array {
    return this.body;
  }

  setRequestBody(start: number, length: number, data: Uint8Array): "ok" | "bad" | "none" {
    if (start === 0) {
      this.body = concat(data, this.body.subarray(Math.min(length, this.body.length)));
      return "ok";
    }
    if (start >= this.body.length) {
      this.body = concat(this.body, data);
      return "ok";
    }
    return "bad";
  }

  responseBody(): Uint8Array {
    return this.responseChunk;
  }

  property(path: string): Uint8Array | undefined {
    return this.properties.get(path) ?? this.root.property(path);
  }

  setProperty(path: string, value: Uint8Array): boolean {
    this.filterState.set(path, value);
    return true;
  }

  sendLocalResponse(reply: LocalResponse): void {
    this.localResponses.push(reply);
  }

  private run(callback: string, args: number[]): number | undefined {
    return this.vm.dispatch(callback, this, [this.id, ...args]);
  }

  private expect(phase: Phase): void {
    if (this.answered) throw new Error(`stream ${this.id} was answered locally: Envoy delivers nothing more to the plugin`);
    if (this.phase !== phase) throw new Error(`stream ${this.id} is in phase '${this.phase}', not '${phase}'`);
  }
}

function pairsOf(headers: Headers): Pair[] {
  return Array.isArray(headers) ? [...(headers as readonly Pair[])] : Object.entries(headers);
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

/** An int64 property value as Envoy serializes it: 8 bytes little-endian. */
export function int64Bytes(n: number | bigint): Uint8Array {
  const out = Buffer.alloc(8);
  out.writeBigInt64LE(BigInt(n));
  return out;
}
