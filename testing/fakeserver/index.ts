export { RealtimeDriver, type RequestListener } from "./driver.js";
export { FAULT_MODES, PodFaults, type FaultMode } from "./faults.js";
export {
  parseFleetFile,
  parsePodSpecs,
  podSpecSchema,
  startFleet,
  type Fleet,
  type FleetOptions,
  type Pod,
  type PodSpec,
} from "./fleet.js";
export { MetricsRenderer, pyFloat, type MetricsFormat } from "./metrics.js";
export { ApiError, DEFAULT_MAX_TOKENS, renderChat } from "./openai.js";
export { createPodServer, type LoadRequest, type PodContext } from "./server.js";
export { FleetFileError, loadLocalFleet, localFleetSpecs, parseLocalFleet, type LocalPod } from "./local-fleet.js";
