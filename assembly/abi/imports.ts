// Raw proxy-wasm ABI 0.2.1 host imports (module "env"). Pointers and sizes are
// i32 on wasm32; V8 rejects the module if any signature differs from the
// host's, so these mirror proxy-wasm/spec exactly. Use hostcalls.ts instead.

@external("env", "proxy_log")
export declare function proxy_log(level: u32, ptr: usize, len: usize): u32;

@external("env", "proxy_get_current_time_nanoseconds")
export declare function proxy_get_current_time_nanoseconds(retTime: usize): u32;

@external("env", "proxy_set_tick_period_milliseconds")
export declare function proxy_set_tick_period_milliseconds(ms: u32): u32;

@external("env", "proxy_get_buffer_bytes")
export declare function proxy_get_buffer_bytes(
  bufferType: u32, start: usize, maxSize: usize, retPtr: usize, retSize: usize,
): u32;

@external("env", "proxy_set_buffer_bytes")
export declare function proxy_set_buffer_bytes(
  bufferType: u32, start: usize, length: usize, dataPtr: usize, dataSize: usize,
): u32;

@external("env", "proxy_get_buffer_status")
export declare function proxy_get_buffer_status(bufferType: u32, retLength: usize, retFlags: usize): u32;

@external("env", "proxy_get_header_map_pairs")
export declare function proxy_get_header_map_pairs(mapType: u32, retPtr: usize, retSize: usize): u32;

@external("env", "proxy_set_header_map_pairs")
export declare function proxy_set_header_map_pairs(mapType: u32, ptr: usize, size: usize): u32;

@external("env", "proxy_replace_header_map_value")
export declare function proxy_replace_header_map_value(
  mapType: u32, keyPtr: usize, keyLen: usize, valuePtr: usize, valueLen: usize,
): u32;

@external("env", "proxy_remove_header_map_value")
export declare function proxy_remove_header_map_value(mapType: u32, keyPtr: usize, keyLen: usize): u32;

@external("env", "proxy_get_property")
export declare function proxy_get_property(pathPtr: usize, pathLen: usize, retPtr: usize, retSize: usize): u32;

@external("env", "proxy_set_property")
export declare function proxy_set_property(pathPtr: usize, pathLen: usize, valuePtr: usize, valueLen: usize): u32;

@external("env", "proxy_send_local_response")
export declare function proxy_send_local_response(
  statusCode: u32,
  detailsPtr: usize, detailsLen: usize,
  bodyPtr: usize, bodyLen: usize,
  headersPtr: usize, headersLen: usize,
  grpcStatus: i32,
): u32;

@external("env", "proxy_get_shared_data")
export declare function proxy_get_shared_data(
  keyPtr: usize, keyLen: usize, retPtr: usize, retSize: usize, retCas: usize,
): u32;

@external("env", "proxy_set_shared_data")
export declare function proxy_set_shared_data(
  keyPtr: usize, keyLen: usize, valuePtr: usize, valueLen: usize, cas: u32,
): u32;

@external("env", "proxy_grpc_stream")
export declare function proxy_grpc_stream(
  upstreamPtr: usize, upstreamLen: usize,
  servicePtr: usize, serviceLen: usize,
  methodPtr: usize, methodLen: usize,
  metadataPtr: usize, metadataLen: usize,
  retToken: usize,
): u32;

@external("env", "proxy_grpc_send")
export declare function proxy_grpc_send(token: u32, msgPtr: usize, msgLen: usize, endStream: u32): u32;

@external("env", "proxy_grpc_cancel")
export declare function proxy_grpc_cancel(token: u32): u32;

@external("env", "proxy_grpc_close")
export declare function proxy_grpc_close(token: u32): u32;

@external("env", "proxy_define_metric")
export declare function proxy_define_metric(metricType: u32, namePtr: usize, nameLen: usize, retId: usize): u32;

@external("env", "proxy_increment_metric")
export declare function proxy_increment_metric(metricId: u32, offset: i64): u32;

@external("env", "proxy_record_metric")
export declare function proxy_record_metric(metricId: u32, value: u64): u32;

@external("env", "proxy_set_effective_context")
export declare function proxy_set_effective_context(contextId: u32): u32;

@external("env", "proxy_continue_stream")
export declare function proxy_continue_stream(streamType: u32): u32;
