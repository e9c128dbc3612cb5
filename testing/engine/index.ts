export { DEFAULT_ENGINE_CONFIG, resolveEngineConfig, type EngineConfig, type EngineConfigInput } from "./config.js";
export {
  Engine,
  RequestRejectedError,
  type EngineCounters,
  type EngineEvent,
  type EngineMetrics,
  type EngineRequestInput,
  type RejectCode,
  type RequestStats,
} from "./engine.js";
export { E2E_BUCKETS_S, ITL_BUCKETS_S, TTFT_BUCKETS_S, type HistogramSnapshot } from "./histogram.js";
export { blockHashes, chainHash, countTokens, type Tokenizer } from "./prompt.js";
