export { findEnvoy, projectRoot } from "./paths.js";
export {
  BUFFER_SLACK_BYTES,
  defaultWasmPath,
  envoyParamsFromGatewayConfig,
  gatewayTemplatePath,
  renderEnvoyConfig,
  type EnvoyConfigParams,
} from "./config.js";
export {
  allocateBaseId,
  startEnvoy,
  validateEnvoyConfig,
  type EnvoyProcess,
  type StartEnvoyOptions,
} from "./process.js";
