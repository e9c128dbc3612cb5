// Root and HTTP context base classes, in the spirit of the proxy-wasm Rust
// SDK's RootContext / HttpContext traits, plus the registry that maps host
// context ids to objects. Plugins subclass these and register a root factory
// per `root_id`.
//
// Fail closed: where the Rust SDK traps on an unknown root or context id, we
// refuse instead, without a trap. An unknown `root_id` gets a root that fails
// its configuration (Envoy then rejects the filter) and whose streams, should
// a host create any, are answered 503. A stream the registry does not know is
// answered 503 by the exports. No request ever continues unchecked.
import { getProperty, HostBytes, log, LogLevel, sendLocalResponse, utf8 } from "./hostcalls";

export const enum HeaderAction { Continue = 0, StopIteration = 1 }
export const enum DataAction { Continue = 0, StopIterationAndBuffer = 1 }

export class RootContext {
  constructor(public readonly id: u32) {}

  onVmStart(vmConfigSize: i32): bool { return true; }
  onConfigure(pluginConfigSize: i32): bool { return true; }
  onTick(): void {}
  onGrpcReceive(token: u32, size: i32): void {}
  onGrpcClose(token: u32, status: u32): void {}
  /** Null means this root serves no HTTP streams (its streams are refused). */
  createHttpContext(id: u32): HttpContext | null { return null; }
  onDone(): bool { return true; }
}

export class HttpContext {
  constructor(public readonly id: u32) {}

  onRequestHeaders(headerCount: i32, endOfStream: bool): HeaderAction { return HeaderAction.Continue; }
  onRequestBody(bodySize: i32, endOfStream: bool): DataAction { return DataAction.Continue; }
  onRequestTrailers(trailerCount: i32): HeaderAction { return HeaderAction.Continue; }
  /** A chunk of the answer passing through (never held: the filter only looks). */
  onResponseBody(bodySize: i32, endOfStream: bool): DataAction { return DataAction.Continue; }
  onDone(): void {}
}

/** Answers every stream 503: for requests no plugin root took responsibility for. */
class RefusedStream extends HttpContext {
  onRequestHeaders(headerCount: i32, endOfStream: bool): HeaderAction {
    refuseStream();
    return HeaderAction.StopIteration;
  }

  onRequestBody(bodySize: i32, endOfStream: bool): DataAction { return DataAction.StopIterationAndBuffer; }
  onRequestTrailers(trailerCount: i32): HeaderAction { return HeaderAction.StopIteration; }
}

/** The root for a `root_id` no plugin registered: a configuration error. */
class UnknownRoot extends RootContext {
  constructor(id: u32, private rootId: string) {
    super(id);
  }

  onConfigure(pluginConfigSize: i32): bool {
    log(LogLevel.Critical, "no plugin registered for root_id '" + this.rootId + "'; refusing every request");
    return false;
  }

  createHttpContext(id: u32): HttpContext | null { return new RefusedStream(id); }
}

const REFUSAL_DETAILS = utf8("llm_gateway_no_plugin");
const REFUSAL_BODY = utf8("The gateway filter is misconfigured");
const NO_HEADERS = new ArrayBuffer(4); // a pairs buffer with count 0

/** A plain 503; Envoy's local_reply_config renders it in the OpenAI error format. */
export function refuseStream(): void {
  sendLocalResponse(503, REFUSAL_DETAILS, REFUSAL_BODY, NO_HEADERS);
}

export type RootFactory = (id: u32) => RootContext;

const factories = new Map<string, RootFactory>();
const roots = new Map<u32, RootContext>();
const streams = new Map<u32, HttpContext>();
const scratch = new HostBytes();

export function registerRoot(rootId: string, factory: RootFactory): void {
  factories.set(rootId, factory);
}

export function rootOf(id: u32): RootContext | null {
  return roots.has(id) ? roots.get(id) : null;
}

export function streamOf(id: u32): HttpContext | null {
  return streams.has(id) ? streams.get(id) : null;
}

export function createContext(id: u32, parentId: u32): void {
  if (parentId == 0) {
    // The root id is only known through a property.
    const rootId = getProperty("plugin_root_id", scratch) ? scratch.toString() : "";
    scratch.release();
    roots.set(id, factories.has(rootId) ? factories.get(rootId)(id) : new UnknownRoot(id, rootId));
    return;
  }
  const root = rootOf(parentId);
  let stream: HttpContext | null = null;
  if (root != null) stream = root.createHttpContext(id);
  streams.set(id, stream != null ? stream : new RefusedStream(id));
}

export function deleteContext(id: u32): void {
  if (streams.has(id)) streams.delete(id);
  else if (roots.has(id)) roots.delete(id);
}
