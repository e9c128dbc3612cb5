// Typed wrappers over the proxy-wasm host calls the gateway uses. Anything the
// host returns was allocated through our exported `malloc`; it lands in a
// HostBytes that the caller releases, so hot paths can read bytes in place
// instead of copying them into strings.
import { freeHostBuffer, keepHostBuffer } from "./host-buffers";
import * as host from "./imports";

export const enum Status {
  Ok = 0,
  NotFound = 1,
  BadArgument = 2,
  Empty = 7,
  CasMismatch = 8,
}

export const enum LogLevel { Trace = 0, Debug = 1, Info = 2, Warn = 3, Error = 4, Critical = 5 }

export const enum MapType { RequestHeaders = 0, RequestTrailers = 1, ResponseHeaders = 2, ResponseTrailers = 3 }

export const enum BufferType { RequestBody = 0, ResponseBody = 1, GrpcReceive = 5, VmConfig = 6, PluginConfig = 7 }

export const enum MetricType { Counter = 0, Gauge = 1, Histogram = 2 }

// Out-parameter slots for host calls; static so a call allocates nothing.
const RET_PTR: usize = memory.data(4);
const RET_SIZE: usize = memory.data(4);
const RET_EXTRA: usize = memory.data(8);

/** Bytes the host handed us; owned by the module until released. */
export class HostBytes {
  ptr: usize = 0;
  len: i32 = 0;

  release(): void {
    if (this.ptr != 0) freeHostBuffer(this.ptr);
    this.ptr = 0;
    this.len = 0;
  }

  /** The bytes now belong to whoever copied ptr and len, to freeHostBuffer() when done; this holds none. */
  handOver(): void {
    keepHostBuffer(this.ptr);
    this.ptr = 0;
    this.len = 0;
  }

  toString(): string {
    return String.UTF8.decodeUnsafe(this.ptr, <usize>this.len);
  }

  /** Takes what the last host call wrote into the return slots. */
  take(status: u32): bool {
    this.release();
    if (status != Status.Ok) return false;
    this.ptr = load<u32>(RET_PTR);
    this.len = load<i32>(RET_SIZE);
    return true;
  }
}

export function utf8(s: string): ArrayBuffer {
  return String.UTF8.encode(s);
}

function bufPtr(b: ArrayBuffer): usize {
  return changetype<usize>(b);
}

export function log(level: LogLevel, message: string): void {
  const bytes = utf8(message);
  host.proxy_log(level, bufPtr(bytes), bytes.byteLength);
}

export function nowMillis(): u64 {
  return nowNanos() / 1_000_000;
}

export function nowNanos(): u64 {
  host.proxy_get_current_time_nanoseconds(RET_EXTRA);
  return load<u64>(RET_EXTRA);
}

export function setTickPeriod(ms: u32): void {
  host.proxy_set_tick_period_milliseconds(ms);
}

export function getBufferBytes(type: BufferType, start: i32, maxSize: i32, out: HostBytes): bool {
  return out.take(host.proxy_get_buffer_bytes(type, start, maxSize, RET_PTR, RET_SIZE));
}

/** Replaces bytes [start, start + length) of a buffer by `data` (start 0, length = size: the whole buffer). */
export function setBufferBytes(type: BufferType, start: i32, length: i32, data: ArrayBuffer): bool {
  return host.proxy_set_buffer_bytes(type, start, length, bufPtr(data), data.byteLength) == Status.Ok;
}

/** How many bytes a buffer holds now; -1 if the host has none. */
export function getBufferSize(type: BufferType): i32 {
  if (host.proxy_get_buffer_status(type, RET_SIZE, RET_PTR) != Status.Ok) return -1;
  return load<i32>(RET_SIZE);
}

/** All headers of a map in the proxy-wasm pairs encoding (see pairs.ts). */
export function getHeaderPairs(map: MapType, out: HostBytes): bool {
  return out.take(host.proxy_get_header_map_pairs(map, RET_PTR, RET_SIZE));
}

/** Replaces a whole header map by the encoded pairs at [ptr, ptr + len) (pairs.ts). */
export function setHeaderPairsRaw(map: MapType, ptr: usize, len: i32): void {
  host.proxy_set_header_map_pairs(map, ptr, len);
}

export function replaceHeader(map: MapType, name: ArrayBuffer, value: ArrayBuffer): void {
  host.proxy_replace_header_map_value(map, bufPtr(name), name.byteLength, bufPtr(value), value.byteLength);
}

export function replaceHeaderRaw(map: MapType, name: ArrayBuffer, valuePtr: usize, valueLen: i32): void {
  host.proxy_replace_header_map_value(map, bufPtr(name), name.byteLength, valuePtr, valueLen);
}

export function removeHeaderRaw(map: MapType, namePtr: usize, nameLen: i32): void {
  host.proxy_remove_header_map_value(map, namePtr, nameLen);
}

export function getProperty(path: string, out: HostBytes): bool {
  return getPropertyBytes(propertyPath(path), out);
}

/** A property path as the host wants it: segments ("upstream.address") joined by NULs. */
export function propertyPath(dotted: string): ArrayBuffer {
  return utf8(dotted.replaceAll(".", "\0"));
}

/** Reads a property by a path made once with propertyPath(), so hot paths encode nothing. */
export function getPropertyBytes(path: ArrayBuffer, out: HostBytes): bool {
  return out.take(host.proxy_get_property(bufPtr(path), path.byteLength, RET_PTR, RET_SIZE));
}

/** Sets a stream's filter state; Envoy keeps it under "wasm." + the path (e.g. for %FILTER_STATE(wasm.name:PLAIN)% in access logs). */
export function setProperty(path: ArrayBuffer, value: ArrayBuffer): void {
  host.proxy_set_property(bufPtr(path), path.byteLength, bufPtr(value), value.byteLength);
}

export function sendLocalResponse(status: u32, details: ArrayBuffer, body: ArrayBuffer, headerPairs: ArrayBuffer): void {
  host.proxy_send_local_response(
    status,
    bufPtr(details), details.byteLength,
    bufPtr(body), body.byteLength,
    bufPtr(headerPairs), headerPairs.byteLength,
    -1,
  );
}

/** Reads a shared-data value into `out`; false if absent. Its CAS is then lastCas(). */
export function getSharedData(key: ArrayBuffer, out: HostBytes): bool {
  return out.take(host.proxy_get_shared_data(bufPtr(key), key.byteLength, RET_PTR, RET_SIZE, RET_EXTRA));
}

export function lastCas(): u32 {
  return load<u32>(RET_EXTRA);
}

export function setSharedData(key: ArrayBuffer, valuePtr: usize, valueLen: i32, cas: u32): Status {
  return <Status>host.proxy_set_shared_data(bufPtr(key), key.byteLength, valuePtr, valueLen, cas);
}

/** Opens a gRPC stream; returns its token, or -status on failure. */
export function grpcStream(upstream: ArrayBuffer, service: ArrayBuffer, method: ArrayBuffer): i64 {
  const status = host.proxy_grpc_stream(
    bufPtr(upstream), upstream.byteLength,
    bufPtr(service), service.byteLength,
    bufPtr(method), method.byteLength,
    0, 0,
    RET_PTR,
  );
  if (status != Status.Ok) return -(<i64>status);
  return <i64>load<u32>(RET_PTR);
}

export function grpcSend(token: u32, message: ArrayBuffer, endStream: bool): Status {
  return <Status>host.proxy_grpc_send(token, bufPtr(message), message.byteLength, endStream ? 1 : 0);
}

export function grpcCancel(token: u32): void {
  host.proxy_grpc_cancel(token);
}

export function defineMetric(type: MetricType, name: string): u32 {
  const n = utf8(name);
  if (host.proxy_define_metric(type, bufPtr(n), n.byteLength, RET_PTR) != Status.Ok) return u32.MAX_VALUE;
  return load<u32>(RET_PTR);
}

export function incrementMetric(id: u32, delta: i64): void {
  if (id != u32.MAX_VALUE) host.proxy_increment_metric(id, delta);
}

export function recordMetric(id: u32, value: u64): void {
  if (id != u32.MAX_VALUE) host.proxy_record_metric(id, value);
}

/** Makes later host calls act on stream `contextId` (a held stream resumed or answered from the tick). */
export function setEffectiveContext(contextId: u32): bool {
  return host.proxy_set_effective_context(contextId) == Status.Ok;
}

/** Resumes the effective stream's request, paused by a callback that returned StopIteration. */
export function continueRequest(): bool {
  return host.proxy_continue_stream(0) == Status.Ok;
}
