// A proxy-wasm (ABI 0.2.1) host for tests, emulating Envoy's: see host.ts
// for the process, vm.ts for one VM, stream.ts for one HTTP stream.
export { BufferType, DataAction, HeaderAction, MapType, Status } from "./abi.js";
export type { LocalResponse, PluginSpec, RootContext } from "./contexts.js";
export { HeaderMap } from "./header-map.js";
export type { GrpcStream } from "./hostcalls.js";
export { ProxyWasmHost } from "./host.js";
export { decodePairs, encodePairs, type Pair } from "./pairs.js";
export { instrumentInstructionCount, INSTRUCTION_COUNTER_EXPORT } from "./instruction-counter.js";
export { HttpStream, int64Bytes, type RequestSpec, type StreamEnd } from "./stream.js";
export { PluginRejected, WasmVm, type LogEntry, type VmOptions } from "./vm.js";
