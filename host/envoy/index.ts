export { envoyVersion, findEnvoy } from "./paths.js";
export { DEFAULT_EDGE_LIMITS, listenerSdsFiles } from "./edge.js";
export { type SdsFile } from "./sds.js";
export {
  BUFFER_SLACK_BYTES,
  CLAIM_HEADERS,
  envoyParamsFromGatewayConfig,
  envoySdsFiles,
  gatewayTemplatePath,
  MODEL_NAME_HEADER,
  POOL_HEADER,
  renderEnvoyConfig,
  STREAM_HEADER,
  renderEnvoyXds,
  xdsResourcesFromGatewayConfig,
  type EnvoyConfigParams,
  type EnvoyXdsConfig,
  type XdsResources,
  type ModelRouteParams,
} from "./config.js";
