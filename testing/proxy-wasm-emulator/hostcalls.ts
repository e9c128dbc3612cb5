// The host functions a plugin imports from "env", with the status codes and
// edge cases of Envoy's host (proxy-wasm-cpp-host src/exports.cc and Envoy's
// extensions/common/wasm/context.cc). Pointers and sizes arrive as i32 and
// are read as u32; any out-of-bounds pointer answers INVALID_MEMORY_ACCESS.
import { BufferType, MAX_BUFFER_TYPE, MAX_MAP_TYPE, MapType, Status } from "./abi.js";
import type { CallContext, RootContext } from "./contexts.js";
import type { GuestMemory } from "./memory.js";
import type { VmMetrics } from "./metrics.js";
import { decodePairs, encodePairs } from "./pairs.js";
import type { SharedData } from "./shared-data.js";

export interface GrpcStream {
  token: number;
  root: RootContext;
  /** From the serialized GrpcService's envoy_grpc.cluster_name (or the raw bytes, as Envoy falls back to). */
  cluster: string;
  service: string;
  method: string;
  /** Every message the plugin sent, in order. */
  sent: Uint8Array[];
  /** The plugin sent end_stream. */
  localEnded: boolean;
  /** cancelled by the plugin, or closed by the test (the remote end). */
  state: "open" | "cancelled" | "closed";
}

/** What the host functions need from the VM they serve. */
export interface HostCallSite {
  readonly label: string;
  readonly vmId: string;
  readonly vmConfiguration: Uint8Array;
  readonly memory: GuestMemory;
  readonly sharedData: SharedData;
  readonly metrics: VmMetrics;
  nowNs(): bigint;
  /** The context the running callback belongs to. */
  context(): CallContext;
  /** Makes context `id` the one later host calls act on, until the callback returns; false if there is none. */
  setEffectiveContext(id: number): boolean;
  log(level: number, message: string): void;
  openGrpcStream(stream: Pick<GrpcStream, "root" | "cluster" | "service" | "method">): number;
  grpcStream(token: number): GrpcStream | undefined;
}

type HostFunction = (...args: never[]) => number;

export class UnsupportedHostCall extends Error {}

export function hostCalls(site: HostCallSite): Record<string, HostFunction> {
  const mem = () => site.memory;
  const u = (n: number) => n >>> 0;

  /** The buffer Envoy would expose now; null = not available (NOT_FOUND). */
  function buffer(name: string, type: number): Uint8Array | null {
    const ctx = site.context();
    switch (type) {
      case BufferType.HttpRequestBody:
        return ctx.requestBody();
      case BufferType.HttpResponseBody:
        return ctx.responseBody();
      case BufferType.GrpcCallMessage:
        return ctx.root.grpcMessage ?? new Uint8Array(0);
      case BufferType.VmConfiguration:
        return site.vmConfiguration;
      case BufferType.PluginConfiguration:
        return ctx.root.configurationVisible && ctx.root.plugin ? Buffer.from(ctx.root.plugin.configuration) : null;
      default:
        throw new UnsupportedHostCall(`proxy-wasm emulator: ${name} of buffer type ${type} is not implemented (${site.label})`);
    }
  }

  return {
    proxy_log(level: number, ptr: number, len: number): number {
      if (u(level) > 5) return Status.BadArgument;
      const message = mem().readString(u(ptr), u(len));
      if (message === null) return Status.InvalidMemoryAccess;
      site.log(level, message);
      return Status.Ok;
    },

    proxy_get_current_time_nanoseconds(retPtr: number): number {
      return mem().writeU64(u(retPtr), site.nowNs()) ? Status.Ok : Status.InvalidMemoryAccess;
    },

    proxy_set_tick_period_milliseconds(ms: number): number {
      site.context().root.tickPeriodMs = u(ms);
      return Status.Ok;
    },

    proxy_get_buffer_bytes(type: number, start: number, maxSize: number, ptrPtr: number, sizePtr: number): number {
      if (u(type) > MAX_BUFFER_TYPE) return Status.BadArgument;
      const bytes = buffer("proxy_get_buffer_bytes", u(type));
      if (bytes === null) return Status.NotFound;
      const from = u(start);
      const length = from > bytes.length ? 0 : Math.min(u(maxSize), bytes.length - from);
      return mem().copyOut(bytes.subarray(from, from + length), u(ptrPtr), u(sizePtr)) ? Status.Ok : Status.InvalidMemoryAccess;
    },

    proxy_set_buffer_bytes(type: number, start: number, length: number, dataPtr: number, dataSize: number): number {
      if (u(type) > MAX_BUFFER_TYPE) return Status.BadArgument;
      if (u(type) !== BufferType.HttpRequestBody) {
        throw new UnsupportedHostCall(`proxy-wasm emulator: proxy_set_buffer_bytes of buffer type ${type} is not implemented (${site.label})`);
      }
      const data = mem().read(u(dataPtr), u(dataSize));
      if (data === null) return Status.InvalidMemoryAccess;
      const result = site.context().setRequestBody(u(start), u(length), data.slice());
      return result === "ok" ? Status.Ok : result === "bad" ? Status.BadArgument : Status.NotFound;
    },

    proxy_get_buffer_status(type: number, lengthPtr: number, flagsPtr: number): number {
      if (u(type) > MAX_BUFFER_TYPE) return Status.BadArgument;
      const bytes = buffer("proxy_get_buffer_status", u(type));
      if (bytes === null) return Status.NotFound;
      const ok = mem().writeU32(u(lengthPtr), bytes.length) && mem().writeU32(u(flagsPtr), 0);
      return ok ? Status.Ok : Status.InvalidMemoryAccess;
    },

    proxy_get_header_map_pairs(type: number, ptrPtr: number, sizePtr: number): number {
      if (u(type) > MAX_MAP_TYPE) return Status.BadArgument;
      if (u(type) > MapType.HttpResponseTrailers) {
        throw new UnsupportedHostCall(`proxy-wasm emulator: proxy_get_header_map_pairs of map type ${type} is not implemented (${site.label})`);
      }
      // A map Envoy does not have at this point reads as no pairs, with OK.
      const pairs = site.context().headerMap(u(type))?.pairs() ?? [];
      const bytes = pairs.length === 0 ? new Uint8Array(0) : encodePairs(pairs);
      return mem().copyOut(bytes, u(ptrPtr), u(sizePtr)) ? Status.Ok : Status.InvalidMemoryAccess;
    },

    // Envoy's Context::setHeaderMapPairs: every entry removed, then each pair added in order.
    proxy_set_header_map_pairs(type: number, ptr: number, size: number): number {
      if (u(type) > MAX_MAP_TYPE) return Status.BadArgument;
      const bytes = mem().read(u(ptr), u(size));
      if (bytes === null) return Status.InvalidMemoryAccess;
      const map = site.context().headerMap(u(type));
      if (map === null) return Status.BadArgument;
      map.replaceAll(decodePairs(bytes));
      return Status.Ok;
    },

    proxy_replace_header_map_value(type: number, keyPtr: number, keyLen: number, valuePtr: number, valueLen: number): number {
      if (u(type) > MAX_MAP_TYPE) return Status.BadArgument;
      const key = mem().readString(u(keyPtr), u(keyLen));
      const value = mem().readString(u(valuePtr), u(valueLen));
      if (key === null || value === null) return Status.InvalidMemoryAccess;
      const map = site.context().headerMap(u(type));
      if (map === null) return Status.BadArgument;
      map.replace(key, value);
      return Status.Ok;
    },

    proxy_remove_header_map_value(type: number, keyPtr: number, keyLen: number): number {
      if (u(type) > MAX_MAP_TYPE) return Status.BadArgument;
      const key = mem().readString(u(keyPtr), u(keyLen));
      if (key === null) return Status.InvalidMemoryAccess;
      const map = site.context().headerMap(u(type));
      if (map === null) return Status.BadArgument;
      map.remove(key);
      return Status.Ok;
    },

    proxy_get_property(pathPtr: number, pathLen: number, ptrPtr: number, sizePtr: number): number {
      const path = mem().readString(u(pathPtr), u(pathLen));
      if (path === null) return Status.InvalidMemoryAccess;
      // Segments arrive NUL-separated ("response\0code").
      const value = site.context().property(path.split("\0").join("."));
      if (value === undefined) return Status.NotFound;
      return mem().copyOut(value, u(ptrPtr), u(sizePtr)) ? Status.Ok : Status.InvalidMemoryAccess;
    },

    proxy_set_property(pathPtr: number, pathLen: number, valuePtr: number, valueLen: number): number {
      const path = mem().readString(u(pathPtr), u(pathLen));
      const value = mem().read(u(valuePtr), u(valueLen));
      if (path === null || value === null) return Status.InvalidMemoryAccess;
      const ctx = site.context();
      return ctx.setProperty?.(path, value) ? Status.Ok : Status.NotFound;
    },

    proxy_set_effective_context(id: number): number {
      return site.setEffectiveContext(u(id)) ? Status.Ok : Status.BadArgument;
    },

    proxy_continue_stream(streamType: number): number {
      // Only the request path is driven (stream type 0).
      const ctx = site.context();
      if (u(streamType) !== 0 || ctx.continueRequest === undefined) return Status.BadArgument;
      return ctx.continueRequest() ? Status.Ok : Status.BadArgument;
    },

    proxy_send_local_response(
      status: number, detailsPtr: number, detailsLen: number, bodyPtr: number, bodyLen: number,
      headersPtr: number, headersLen: number, grpcStatus: number,
    ): number {
      const details = mem().readString(u(detailsPtr), u(detailsLen));
      const body = mem().readString(u(bodyPtr), u(bodyLen));
      const headers = mem().read(u(headersPtr), u(headersLen));
      if (details === null || body === null || headers === null) return Status.InvalidMemoryAccess;
      site.context().sendLocalResponse({ status: u(status), details, body, headers: decodePairs(headers), grpcStatus });
      return Status.Ok;
    },

    proxy_get_shared_data(keyPtr: number, keyLen: number, ptrPtr: number, sizePtr: number, casPtr: number): number {
      const key = mem().readString(u(keyPtr), u(keyLen));
      if (key === null) return Status.InvalidMemoryAccess;
      const entry = site.sharedData.get(site.vmId, key);
      if (entry === undefined) return Status.NotFound;
      const ok = mem().copyOut(entry.value, u(ptrPtr), u(sizePtr)) && mem().writeU32(u(casPtr), entry.cas);
      return ok ? Status.Ok : Status.InvalidMemoryAccess;
    },

    proxy_set_shared_data(keyPtr: number, keyLen: number, valuePtr: number, valueLen: number, cas: number): number {
      const key = mem().readString(u(keyPtr), u(keyLen));
      const value = mem().read(u(valuePtr), u(valueLen));
      if (key === null || value === null) return Status.InvalidMemoryAccess;
      return site.sharedData.set(site.vmId, key, value, u(cas));
    },

    proxy_grpc_stream(
      upstreamPtr: number, upstreamLen: number, servicePtr: number, serviceLen: number,
      methodPtr: number, methodLen: number, metadataPtr: number, metadataLen: number, tokenPtr: number,
    ): number {
      const upstream = mem().read(u(upstreamPtr), u(upstreamLen));
      const service = mem().readString(u(servicePtr), u(serviceLen));
      const method = mem().readString(u(methodPtr), u(methodLen));
      const metadata = mem().read(u(metadataPtr), u(metadataLen));
      if (upstream === null || service === null || method === null || metadata === null) return Status.InvalidMemoryAccess;
      // gRPC callbacks go to the root context, whichever context opened the stream.
      const token = site.openGrpcStream({ root: site.context().root, cluster: grpcCluster(upstream), service, method });
      return mem().writeU32(u(tokenPtr), token) ? Status.Ok : Status.InvalidMemoryAccess;
    },

    proxy_grpc_send(token: number, ptr: number, len: number, endStream: number): number {
      const message = mem().read(u(ptr), u(len));
      if (message === null) return Status.InvalidMemoryAccess;
      const stream = site.grpcStream(u(token));
      if (stream === undefined || stream.state !== "open") return Status.NotFound;
      stream.sent.push(message);
      if (endStream !== 0) stream.localEnded = true;
      return Status.Ok;
    },

    proxy_grpc_cancel(token: number): number {
      const stream = site.grpcStream(u(token));
      if (stream === undefined || stream.state !== "open") return Status.NotFound;
      stream.state = "cancelled";
      return Status.Ok;
    },

    proxy_define_metric(type: number, namePtr: number, nameLen: number, idPtr: number): number {
      const name = mem().readString(u(namePtr), u(nameLen));
      if (name === null) return Status.InvalidMemoryAccess;
      const { status, id } = site.metrics.define(u(type), name);
      if (status !== Status.Ok) return status;
      return mem().writeU32(u(idPtr), id) ? Status.Ok : Status.InvalidMemoryAccess;
    },

    proxy_increment_metric(id: number, offset: bigint): number {
      return site.metrics.increment(u(id), offset);
    },

    proxy_record_metric(id: number, value: bigint): number {
      return site.metrics.record(u(id), BigInt.asUintN(64, value));
    },
  };
}

/**
 * The cluster of a serialized envoy.config.core.v3.GrpcService whose first
 * field is envoy_grpc { cluster_name }; bytes that are not such a message are
 * taken as the cluster name itself, as Envoy does.
 */
function grpcCluster(bytes: Uint8Array): string {
  const inner = onlyField1(bytes);
  const name = inner && onlyField1(inner);
  return Buffer.from(name ?? bytes).toString("utf8");
}

/** The payload of a message made of exactly one length-delimited field 1, else null. */
function onlyField1(b: Uint8Array): Uint8Array | null {
  if (b[0] !== 0x0a) return null;
  let length = 0;
  let pos = 1;
  for (let shift = 0; pos < b.length && shift < 35; shift += 7) {
    const byte = b[pos++];
    length += (byte & 0x7f) * 2 ** shift;
    if (byte < 0x80) return pos + length === b.length ? b.subarray(pos) : null;
  }
  return null;
}
