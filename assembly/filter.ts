// Entry point of the Envoy plugin (build/filter.wasm). One module serves two
// roots: `llm_gateway` (the HTTP filter on every worker) and
// `llm_gateway_link` (the singleton service that streams snapshots in).
import { registerRoot, RootContext } from "./abi/context";
import { GatewayRoot } from "./gateway/filter-root";
import { LinkRoot } from "./gateway/link";

import "./abi/abort";
export * from "./abi/exports";

registerRoot("llm_gateway", (id: u32): RootContext => new GatewayRoot(id));
registerRoot("llm_gateway_link", (id: u32): RootContext => new LinkRoot(id));
