// The functions the host calls (proxy-wasm ABI 0.2.1). Each one looks up the
// context object and forwards. A root callback for an unknown context is a
// no-op; a stream callback for an unknown stream refuses the request (503),
// never lets it through and never traps. Each enters and leaves through the
// collector (collector.ts), which may collect garbage once it returns.
// Re-exported from each plugin entry file.
import { enter, leave } from "./collector";
import { hostBuffer } from "./host-buffers";
import { createContext, DataAction, deleteContext, HeaderAction, refuseStream, rootOf, streamOf } from "./context";

export function proxy_abi_version_0_2_1(): void {}

/** The host allocates every buffer it returns to us through this. */
export function malloc(size: usize): usize {
  return hostBuffer(size);
}

export function proxy_on_context_create(id: u32, parentId: u32): void {
  enter();
  createContext(id, parentId);
  leave();
}

export function proxy_on_vm_start(id: u32, vmConfigSize: u32): bool {
  enter();
  const root = rootOf(id);
  const ok = root == null ? true : root.onVmStart(<i32>vmConfigSize);
  leave();
  return ok;
}

export function proxy_on_configure(id: u32, pluginConfigSize: u32): bool {
  enter();
  const root = rootOf(id);
  const ok = root == null ? true : root.onConfigure(<i32>pluginConfigSize);
  leave();
  return ok;
}

export function proxy_on_tick(id: u32): void {
  enter();
  const root = rootOf(id);
  if (root != null) root.onTick();
  leave(true);
}

export function proxy_on_request_headers(id: u32, headerCount: u32, endOfStream: u32): u32 {
  enter();
  const stream = streamOf(id);
  let action: u32 = HeaderAction.StopIteration;
  if (stream == null) refuseStream();
  else action = stream.onRequestHeaders(<i32>headerCount, endOfStream != 0);
  leave();
  return action;
}

export function proxy_on_request_body(id: u32, bodySize: u32, endOfStream: u32): u32 {
  enter();
  const stream = streamOf(id);
  const action = stream == null ? DataAction.StopIterationAndBuffer : stream.onRequestBody(<i32>bodySize, endOfStream != 0);
  leave();
  return action;
}

export function proxy_on_request_trailers(id: u32, trailerCount: u32): u32 {
  enter();
  const stream = streamOf(id);
  const action = stream == null ? HeaderAction.StopIteration : stream.onRequestTrailers(<i32>trailerCount);
  leave();
  return action;
}

export function proxy_on_response_body(id: u32, bodySize: u32, endOfStream: u32): u32 {
  enter();
  const stream = streamOf(id);
  const action = stream == null ? DataAction.Continue : stream.onResponseBody(<i32>bodySize, endOfStream != 0);
  leave();
  return action;
}

export function proxy_on_grpc_receive_initial_metadata(id: u32, token: u32, headerCount: u32): void {}

export function proxy_on_grpc_receive(id: u32, token: u32, size: u32): void {
  enter();
  const root = rootOf(id);
  if (root != null) root.onGrpcReceive(token, <i32>size);
  leave();
}

export function proxy_on_grpc_receive_trailing_metadata(id: u32, token: u32, trailerCount: u32): void {}

export function proxy_on_grpc_close(id: u32, token: u32, status: u32): void {
  enter();
  const root = rootOf(id);
  if (root != null) root.onGrpcClose(token, status);
  leave();
}

export function proxy_on_done(id: u32): bool {
  enter();
  const stream = streamOf(id);
  let done = true;
  if (stream != null) stream.onDone();
  else {
    const root = rootOf(id);
    if (root != null) done = root.onDone();
  }
  leave();
  return done;
}

export function proxy_on_delete(id: u32): void {
  enter();
  deleteContext(id);
  leave();
}
