// The local launcher behind `npm start`: the fake fleet, the aggregator and
// Envoy with our filter, until Ctrl-C.
import { parseArgs } from "node:util";
import { join } from "node:path";
import { ConfigError, loadGatewayConfig } from "../config.js";
import { projectRoot } from "../paths.js";
import { startStack, type Stack } from "../stack.js";

const { values } = parseArgs({
  options: { config: { type: "string", short: "c" }, help: { type: "boolean", short: "h" } },
});
if (values.help) {
  console.log("usage: npm start [-- --config FILE]   (GATEWAY_PORT overrides the listener port)");
  process.exit(0);
}

const configPath = values.config ?? join(projectRoot, "config", "local.yaml");
let stack: Stack;
try {
  const config = loadGatewayConfig(configPath);
  const portEnv = process.env.GATEWAY_PORT;
  const gatewayPort = portEnv ? Number(portEnv) : undefined;
  if (gatewayPort !== undefined && !(Number.isInteger(gatewayPort) && gatewayPort > 0 && gatewayPort < 65536)) {
    throw new Error(`GATEWAY_PORT must be a port number, got "${portEnv}"`);
  }
  console.log(`starting the gateway from ${configPath}`);
  stack = await startStack(config, { gatewayPort, log: (line) => console.log(line) });
} catch (err) {
  console.error(err instanceof ConfigError ? err.message : `failed to start: ${(err as Error).message}`);
  process.exit(1);
}

const model = stack.config.pools[0]?.baseModel ?? "MODEL";
console.log(`envoy admin on ${stack.envoy.adminUrl}`);
if (stack.aggregator.metricsPort) console.log(`aggregator metrics on http://${stack.config.aggregator.host}:${stack.aggregator.metricsPort}/metrics`);
console.log(`gateway ready at ${stack.gatewayUrl}`);
console.log(`try: curl ${stack.gatewayUrl}/v1/chat/completions -H 'content-type: application/json' ` +
  `-d '{"model":"${model}","messages":[{"role":"user","content":"Hello"}]}'`);

let stopping = false;
async function stop(signal: string) {
  if (stopping) return;
  stopping = true;
  console.log(`${signal}: stopping`);
  await stack.close();
  console.log("stopped");
  process.exit(0);
}
process.on("SIGINT", () => void stop("SIGINT"));
process.on("SIGTERM", () => void stop("SIGTERM"));
