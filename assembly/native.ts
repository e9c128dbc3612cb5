// Entry point of the standalone build (build/native.wasm + asc's raw JS
// bindings) that Node tests, the simulator and tools load. It exposes the very
// Router and FleetView the Envoy filter runs, with no proxy-wasm host
// underneath: what the filter keeps in shared data (the in-flight table, the
// prefix log) is handed in and out as bytes, so a caller running several
// instances (one per simulated Envoy worker) shares them as Envoy would.
// Only this file's exports are the module's: each group lives in
// assembly/native/ by job and is re-exported here.
export {
  reset, setClock, setFullScan, setHealthRules, setHoldLimits, setReplicaPlace, setShortlistWalks, setViewPolicy, setWriter,
} from "./native/instance";
export { setSnapshot, snapshotJson } from "./native/snapshot-json";
export { boardBusy, cancel, candidates, endRequest, firstBytes, heldCount, pump, recordsPicks, route } from "./native/requests";
export {
  boardBytes, exchangePrefixLog, flushInflight, inflightOf, inflightPublished, inflightTable, refusalTable, setBoard, setInflight, setPeers,
  setRefusals,
} from "./native/shared-data";
export {
  linkPrefixApply, linkPrefixReport, linkQueueAdopt, linkQueueReport, linkReceive, linkReport, linkReset,
} from "./native/link";
export { usageIn, usageTailFind, usageTailPush, usageTailReset, usageTailStreamEnd } from "./native/usage";
