export { envoyVersion, findEnvoy } from "./paths.js";
export { DEFAULT_EDGE_LIMITS, listenerSdsFiles } from "./edge.js";
export { type SdsFile } from "./sds.js";
export {
  BUFFER_SLACK_BYTES,
  envoyParamsFromGatewayConfig,
  envoySdsFiles,
  gatewayTemplatePath,
  renderEnvoyConfig,
  renderEnvoyXds,
  xdsResourcesFromGatewayConfig,
  type EnvoyXdsConfig,
  type XdsResources,
} from "./config.js";
export { CLAIM_HEADERS, MODEL_NAME_HEADER, POOL_HEADER, STREAM_HEADER, type EnvoyConfigParams, type ModelRouteParams } from "./params.js";
