// The local launcher behind `npm start`: the fake fleet, the aggregator and
// Envoy with our filter, until Ctrl-C, SIGTERM or SIGHUP (see shutdown.ts).
// Exit codes: 0 after a requested stop, 1 when starting fails, Envoy dies or
// stopping fails, 128 + n when a second signal n cut the stop short.
import { mkdirSync, readdirSync, rmSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { ConfigError, formatHostPort, loadGatewayConfig, resolveConfigHosts } from "../../host/config.js";
import { envoyWarningFilter } from "./envoy-process.js";
import { projectRoot } from "../../host/paths.js";
import { FleetFileError, loadLocalFleet } from "../fakeserver/index.js";
import { startStack, type Stack } from "./stack.js";
import { installShutdown } from "./shutdown.js";
import { startReplicaStack, type ReplicaStack } from "./replicas.js";

const USAGE = "usage: npm start [-- --config FILE] [--fleet FILE] [--run-dir DIR] [--envoys R] [--aggregators N] [--front PORT]\n" +
  "  (GATEWAY_PORT overrides the listener port)\n" +
  "  without --config: config/local.yaml and its fake pods, config/local-fleet.yaml; with it, fake pods only from --fleet\n" +
  "  --envoys R: R Envoys, Envoy k on gateway.port + k, admin on gateway.adminPort + k\n" +
  "  --aggregators N: N aggregator processes on the config's aggregator.leaderElection.peers\n" +
  "    (without --config: config/local-replicas.yaml, two peers)\n" +
  "  --front PORT: a round-robin Envoy on PORT in front of the Envoys (docs/live-replicas.md)";
const KEEP_RUNS = 10;
const RUN_NAME = /^\d{8}T\d{6}Z-\d+$/;

/** A new folder for this run's files under `base`, named by UTC start time and pid so names sort by age. */
function createRunDir(base: string): string {
  const stamp = new Date().toISOString().replace(/[-:]/g, "").replace(/\.\d+Z$/, "Z");
  const dir = join(base, `${stamp}-${process.pid}`);
  mkdirSync(dir, { recursive: true });
  return dir;
}

/** Keeps the newest KEEP_RUNS run folders; called once a run has started, so failed starts cost no old log. */
function pruneRuns(base: string): void {
  const runs = readdirSync(base).filter((name) => RUN_NAME.test(name)).sort();
  for (const old of runs.slice(0, -KEEP_RUNS)) rmSync(join(base, old), { recursive: true, force: true });
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      config: { type: "string", short: "c" },
      fleet: { type: "string" },
      "run-dir": { type: "string" },
      envoys: { type: "string" },
      aggregators: { type: "string" },
      front: { type: "string" },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help) {
    console.log(USAGE);
    return;
  }
  // A closed terminal (SIGHUP) makes writes fail with EIO; that must not
  // crash the launcher while it is stopping what it started.
  process.stdout.on("error", () => {});
  process.stderr.on("error", () => {});

  const count = (flag: string, text: string | undefined, max: number): number | undefined => {
    if (text === undefined) return undefined;
    const n = Number(text);
    if (Number.isInteger(n) && n >= 1 && n <= max) return n;
    console.error(`--${flag}: expected an integer 1..${max}, got "${text}"`);
    process.exit(1);
  };
  const envoys = count("envoys", values.envoys, 16);
  const aggregators = count("aggregators", values.aggregators, 8);
  const frontPort = values.front === undefined ? undefined : Number(values.front);
  if (frontPort !== undefined && !(Number.isInteger(frontPort) && frontPort >= 0 && frontPort < 65536)) {
    console.error(`--front: expected a port number, got "${values.front}"`);
    process.exit(1);
  }
  const replicated = envoys !== undefined || aggregators !== undefined || frontPort !== undefined;
  const defaultConfig = (aggregators ?? 1) > 1 ? "local-replicas.yaml" : "local.yaml";
  const configPath = values.config ?? join(projectRoot, "config", defaultConfig);
  // Your own config points at your own pods: fake ones start only when asked for.
  const fleetPath = values.fleet ?? (values.config === undefined ? join(projectRoot, "config", "local-fleet.yaml") : undefined);
  const portEnv = process.env.GATEWAY_PORT;
  const gatewayPort = portEnv ? Number(portEnv) : undefined;
  if (gatewayPort !== undefined && !(Number.isInteger(gatewayPort) && gatewayPort > 0 && gatewayPort < 65536)) {
    console.error(`GATEWAY_PORT must be a port number, got "${portEnv}"`);
    process.exit(1);
  }

  let starting: Promise<Stack | ReplicaStack> | undefined;
  const shutdown = installShutdown({
    stop: async () => {
      // A stop during start-up waits for it, then closes what it started.
      const stack = await starting?.catch(() => undefined);
      await stack?.close();
    },
    log: (line) => console.log(line),
  });

  let stack: Stack | ReplicaStack;
  const runsBase = resolve(values["run-dir"] ?? join(projectRoot, ".run"));
  let runDir: string | undefined;
  try {
    const config = await resolveConfigHosts(loadGatewayConfig(configPath), configPath);
    const fleet = fleetPath === undefined ? undefined : loadLocalFleet(fleetPath, config);
    runDir = createRunDir(runsBase);
    const envoyLog = join(runDir, "envoy.log");
    console.log(`starting the gateway from ${configPath}`);
    console.log(replicated ? `logs: ${runDir}` : `envoy log: ${envoyLog}`);
    const warning = envoyWarningFilter();
    starting = replicated ? startReplicaStack(config, {
      configPath: resolve(configPath),
      envoys: envoys ?? 1,
      aggregators: aggregators ?? 1,
      frontPort,
      gatewayPort,
      fleet,
      envoyLogLevel: "info",
      logDir: runDir,
      onEnvoyLog: (name, line) => {
        if (warning(line)) console.error(`[${name}] ${line}`);
      },
      onAggregatorLine: (k, line) => console.log(`[aggregator ${k}] ${line.replace(/^\[aggregator\] /, "")}`),
      log: (line) => console.log(line),
    }) : startStack(config, {
      gatewayPort,
      fleet,
      // Edits to the file reload the running gateway (SIGHUP still stops it: this is a terminal program).
      configPath,
      // info in the file; the terminal only gets warnings and errors.
      envoyLogLevel: "info",
      envoyLogFile: envoyLog,
      onEnvoyLog: (line) => {
        if (warning(line)) console.error(`[envoy] ${line}`);
      },
      log: (line) => console.log(line),
    });
    stack = await starting;
  } catch (err) {
    if (shutdown.stopping) return; // the stop already under way exits
    // A run that failed before Envoy wrote anything leaves no empty folder to crowd out real logs.
    if (runDir && readdirSync(runDir).length === 0) rmSync(runDir, { recursive: true });
    const known = err instanceof ConfigError || err instanceof FleetFileError;
    console.error(known ? (err as Error).message : `failed to start: ${(err as Error).message}`);
    process.exit(1);
  }
  if (shutdown.stopping) return;
  pruneRuns(runsBase);
  if ("envoys" in stack) return reportReplicas(stack, shutdown);

  void stack.envoy.exited.then((code) => {
    if (shutdown.stopping) return;
    console.error(`envoy exited unexpectedly (${code === -1 ? "killed by a signal" : `exit code ${code}`}); its log is in the file above`);
    shutdown.begin("envoy exited", 1);
  });

  const model = stack.config.pools[0]?.baseModel ?? "MODEL";
  console.log(`envoy admin on ${stack.envoy.adminUrl} (pid ${stack.envoy.pid})`);
  if (stack.aggregator.metricsPort) console.log(`aggregator metrics on http://${formatHostPort(stack.config.aggregator.host, stack.aggregator.metricsPort)}/metrics`);
  console.log(`gateway ready at ${stack.gatewayUrl}`);
  const jwt = stack.config.gateway.jwt;
  console.log(`try: curl ${stack.gatewayUrl}/v1/chat/completions -H 'content-type: application/json' ` +
    (jwt ? `-H "authorization: Bearer $TOKEN" ` : "") +
    `-d '{"model":"${model}","messages":[{"role":"user","content":"Hello"}]}'`);
  if (jwt) console.log(`JWT is on: every path but /health needs a token from ${jwt.issuer} (how to mint one for a test: docs/jwt.md)`);
}

/** Prints where each part listens; a part that dies is reported, and the run ends once every Envoy or every aggregator is gone. */
function reportReplicas(stack: ReplicaStack, shutdown: ReturnType<typeof installShutdown>): void {
  const { config } = stack;
  const stop = (reason: string) => shutdown.begin(reason, 1);
  for (const a of stack.aggregators) {
    const metrics = a.metricsPort === null ? "" : `, metrics on http://${formatHostPort(config.aggregator.host, a.metricsPort)}/metrics`;
    console.log(`aggregator ${a.index} on ${a.grpcAddress} (pid ${a.process.pid})${metrics}`);
  }
  for (const [k, e] of stack.envoys.entries()) console.log(`envoy ${k} on ${e.listenerAddresses.llm_gateway}, admin on ${e.adminUrl} (pid ${e.pid})`);
  if (stack.front) console.log(`front (round-robin over the envoys) on ${stack.front.url}, admin on ${stack.front.envoy.adminUrl} (pid ${stack.front.envoy.pid})`);
  let envoysLeft = stack.envoys.length;
  let aggregatorsLeft = stack.aggregators.length;
  for (const [k, e] of stack.envoys.entries()) {
    void e.exited.then(() => {
      if (shutdown.stopping) return;
      envoysLeft--;
      console.error(`envoy ${k} exited; ${envoysLeft} of ${stack.envoys.length} left (its log: envoy-${k}.log in the run folder)`);
      if (envoysLeft === 0) stop("every envoy exited");
    });
  }
  for (const a of stack.aggregators) {
    void a.process.exited.then(() => {
      if (shutdown.stopping) return;
      aggregatorsLeft--;
      console.error(`aggregator ${a.index} exited; ${aggregatorsLeft} of ${stack.aggregators.length} left`);
      if (aggregatorsLeft === 0) stop("every aggregator exited");
    });
  }
  void stack.front?.envoy.exited.then(() => {
    if (!shutdown.stopping) stop("the front exited");
  });
  const model = config.pools[0]?.baseModel ?? "MODEL";
  console.log(`gateway ready at ${stack.gatewayUrl}`);
  console.log(`try: curl ${stack.gatewayUrl}/v1/chat/completions -H 'content-type: application/json' ` +
    `-d '{"model":"${model}","messages":[{"role":"user","content":"Hello"}]}'`);
}

await main();
