// CLI: node dist/host/aggregator/main.js (--config FILE | --config-resource NAMESPACE/NAME) [--port N] [--metrics-port N]
//   [--advertise HOST:PORT] [--identity NAME]   (with aggregator.leaderElection: how the other aggregators know this one)
// Edits to the config file are applied without a restart (reload.ts); SIGHUP
// applies the file again even when it did not change. With --config-resource
// the config is an InferenceGatewayConfig object, followed the same way and
// each outcome written to its status (config-resource.ts).
import { parseArgs } from "node:util";
import { ConfigError, formatHostPort, loadGatewayConfig, parseConfigFile } from "../config.js";
import { watchConfigFile } from "./config-watch.js";
import { ConfigResource, parseConfigResourceRef } from "./config-resource.js";
import { loadKubeConfig } from "../discovery/kubernetes.js";
import { checkPortsFree, explainBindError, type PortClaim } from "../ports.js";
import { startAggregator } from "./index.js";
import { metricsUrl } from "./metrics.js";

const USAGE = "usage: main.js (--config FILE | --config-resource NAMESPACE/NAME) [--port N] [--metrics-port N] [--advertise HOST:PORT] [--identity NAME]";

function portArg(value: string | undefined, flag: string): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new Error(`${flag}: expected a port 0..65535, got ${JSON.stringify(value)}`);
  return n;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      config: { type: "string" },
      "config-resource": { type: "string" },
      port: { type: "string" },
      "metrics-port": { type: "string" },
      advertise: { type: "string" },
      identity: { type: "string" },
    },
  });
  if (!values.config === !values["config-resource"]) throw new Error(USAGE);
  const log = (line: string) => console.log(`[aggregator] ${line}`);
  const resource = values["config-resource"]
    ? await ConfigResource.open({ kubeConfig: await loadKubeConfig(), ref: parseConfigResourceRef(values["config-resource"]), log })
    : null;
  const config = resource ? await resource.initial() : loadGatewayConfig(values.config!);
  const port = portArg(values.port, "--port");
  const metricsPort = portArg(values["metrics-port"], "--metrics-port");
  // A second aggregator on the same ports is refused naming the field, as `npm start` does.
  const { host: bindHost } = config.aggregator;
  const claims: PortClaim[] = [
    { part: values.port === undefined ? "aggregator.port" : "--port", host: bindHost, port: port ?? config.aggregator.port },
    { part: values["metrics-port"] === undefined ? "aggregator.metricsPort" : "--metrics-port", host: bindHost, port: metricsPort ?? config.aggregator.metricsPort },
  ];
  await checkPortsFree(claims);
  const aggregator = await startAggregator(config, { port, metricsPort, log, advertise: values.advertise, identity: values.identity }).catch((err: unknown) => {
    throw explainBindError(err, claims);
  });
  const host = config.aggregator.host;
  // Launchers wait for this exact line.
  console.log(`aggregator listening grpc=${formatHostPort(host, aggregator.grpcPort)}`);
  if (aggregator.metricsPort !== null) log(`metrics at ${metricsUrl(host, aggregator.metricsPort)}`);
  resource?.follow((next) => aggregator.reload(next), (reason) => aggregator.refuseReload(reason));
  const watcher = values.config
    ? await watchConfigFile({
        path: values.config,
        load: async (text, path) => parseConfigFile(text, path),
        apply: (next) => aggregator.reload(next),
        refuse: (reason) => aggregator.refuseReload(reason),
        log,
      })
    : null;
  if (watcher) process.on("SIGHUP", () => void watcher.check({ force: true }));

  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log(`${signal}: shutting down`);
    watcher?.close();
    resource?.close();
    aggregator.close().then(
      () => process.exit(0),
      (err) => {
        console.error(err);
        process.exit(1);
      },
    );
  };
  process.on("SIGINT", () => stop("SIGINT"));
  process.on("SIGTERM", () => stop("SIGTERM"));
}

main().catch((err) => {
  console.error(err instanceof ConfigError ? err.message : `aggregator: ${(err as Error).message ?? err}`);
  process.exit(1);
});
