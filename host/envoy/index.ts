export { envoyVersion, findEnvoy } from "./paths.js";
export {
  BUFFER_SLACK_BYTES,
  envoyParamsFromGatewayConfig,
  gatewayTemplatePath,
  renderEnvoyConfig,
  type EnvoyConfigParams,
} from "./config.js";
export {
  allocateBaseId,
  envoyWarningFilter,
  startEnvoy,
  validateEnvoyConfig,
  type EnvoyProcess,
  type StartEnvoyOptions,
} from "./process.js";
