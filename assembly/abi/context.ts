// Root and HTTP context base classes, in the spirit of the proxy-wasm Rust
// SDK's RootContext / HttpContext traits, plus the registry that maps host
// context ids to objects. Plugins subclass these and register a root factory
// per `root_id`.
import { getProperty, HostBytes, log, LogLevel } from "./hostcalls";

export const enum HeaderAction { Continue = 0, StopIteration = 1 }
export const enum DataAction { Continue = 0, StopIterationAndBuffer = 1 }

export class RootContext {
  constructor(public readonly id: u32) {}

  onVmStart(vmConfigSize: i32): bool { return true; }
  onConfigure(pluginConfigSize: i32): bool { return true; }
  onTick(): void {}
  onGrpcReceive(token: u32, size: i32): void {}
  onGrpcClose(token: u32, status: u32): void {}
  /** Null means this root serves no HTTP streams. */
  createHttpContext(id: u32): HttpContext | null { return null; }
  onDone(): bool { return true; }
}

export class HttpContext {
  constructor(public readonly id: u32) {}

  onRequestHeaders(headerCount: i32, endOfStream: bool): HeaderAction { return HeaderAction.Continue; }
  onRequestBody(bodySize: i32, endOfStream: bool): DataAction { return DataAction.Continue; }
  onDone(): void {}
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
    // The root id is only known through a property; an unknown one gets an
    // inert root so the host sees no failure.
    const rootId = getProperty("plugin_root_id", scratch) ? scratch.toString() : "";
    scratch.release();
    if (factories.has(rootId)) {
      roots.set(id, factories.get(rootId)(id));
    } else {
      log(LogLevel.Error, "no plugin registered for root_id '" + rootId + "'");
      roots.set(id, new RootContext(id));
    }
    return;
  }
  const root = rootOf(parentId);
  if (root == null) return;
  const stream = root.createHttpContext(id);
  if (stream != null) streams.set(id, stream);
}

export function deleteContext(id: u32): void {
  if (streams.has(id)) streams.delete(id);
  else if (roots.has(id)) roots.delete(id);
}
