// CLI: node dist/host/aggregator/main.js --config FILE [--port N] [--metrics-port N]
// Edits to the config file are applied without a restart (reload.ts); SIGHUP
// applies the file again even when it did not change.
import { parseArgs } from "node:util";
import { ConfigError, formatHostPort, loadGatewayConfig } from "../config.js";
import { watchConfigFile } from "./config-watch.js";
import { startAggregator } from "./index.js";
import { metricsUrl } from "./metrics.js";

const USAGE = "usage: main.js --config FILE [--port N] [--metrics-port N]";

function portArg(value: string | undefined, flag: string): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new Error(`${flag}: expected a port 0..65535, got ${JSON.stringify(value)}`);
  return n;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: { config: { type: "string" }, port: { type: "string" }, "metrics-port": { type: "string" } },
  });
  if (!values.config) throw new Error(USAGE);
  const config = loadGatewayConfig(values.config);
  const log = (line: string) => console.log(`[aggregator] ${line}`);
  const aggregator = await startAggregator(config, {
    port: portArg(values.port, "--port"),
    metricsPort: portArg(values["metrics-port"], "--metrics-port"),
    log,
  });
  const host = config.aggregator.host;
  // Launchers wait for this exact line.
  console.log(`aggregator listening grpc=${formatHostPort(host, aggregator.grpcPort)}`);
  if (aggregator.metricsPort !== null) log(`metrics at ${metricsUrl(host, aggregator.metricsPort)}`);
  const watcher = await watchConfigFile({
    path: values.config,
    load: async (path) => loadGatewayConfig(path),
    apply: (next) => aggregator.reload(next),
    refuse: (reason) => aggregator.refuseReload(reason),
    log,
  });
  process.on("SIGHUP", () => void watcher.check({ force: true }));

  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log(`${signal}: shutting down`);
    watcher.close();
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
