// The overhead bench's floor (build/floor-filter.wasm, never shipped): the
// least a buffering Wasm filter does on this ABI layer. It holds the request
// until its body is complete, sets one request header, and reads nothing.
import { DataAction, HeaderAction, HttpContext, registerRoot, RootContext } from "./abi/context";
import { MapType, replaceHeader, utf8 } from "./abi/hostcalls";

import "./abi/abort";
export * from "./abi/exports";

// The bench's Envoy config (bench/floor-envoy.ts) names this root.
const FLOOR_ROOT_ID = "bench_floor";
const HEADER_NAME = utf8("x-bench-floor");
const HEADER_VALUE = utf8("1");

class FloorStream extends HttpContext {
  onRequestHeaders(headerCount: i32, endOfStream: bool): HeaderAction {
    if (!endOfStream) return HeaderAction.StopIteration;
    replaceHeader(MapType.RequestHeaders, HEADER_NAME, HEADER_VALUE);
    return HeaderAction.Continue;
  }

  onRequestBody(bodySize: i32, endOfStream: bool): DataAction {
    if (!endOfStream) return DataAction.StopIterationAndBuffer;
    replaceHeader(MapType.RequestHeaders, HEADER_NAME, HEADER_VALUE);
    return DataAction.Continue;
  }
}

class FloorRoot extends RootContext {
  createHttpContext(id: u32): HttpContext | null { return new FloorStream(id); }
}

registerRoot(FLOOR_ROOT_ID, (id: u32): RootContext => new FloorRoot(id));
