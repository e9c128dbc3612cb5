// `npm start` end to end: the launcher as a child process, with its own
// Envoy, aggregator and fake pods on fixed free ports.
import { generateKeyPairSync } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { envoyWarningFilter } from "../../testing/launcher/envoy-process.js";
import { projectRoot } from "../../host/paths.js";
import { freePorts, isRunning, killLaunched, launch, launcherPath, launchGateway, portIsFree, type Launched } from "../helpers/launcher.js";
import { waitFor } from "../helpers/stack.js";

interface Ports {
  gateway: number;
  admin: number;
  aggregator: number;
  metrics: number;
  podA: number;
  podB: number;
}

let dir: string;
let runDir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "llm-gateway-launcher-"));
  runDir = join(dir, "runs");
});
afterEach(() => killLaunched());
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function allocatePorts(): Promise<Ports> {
  const [gateway, admin, aggregator, metrics, podA, podB] = await freePorts(6);
  return { gateway, admin, aggregator, metrics, podA, podB };
}

let configCount = 0;
function writeConfig(p: Ports, gatewayHost = "127.0.0.1"): string {
  const path = join(dir, `gateway-${configCount++}.yaml`);
  writeFileSync(
    path,
    // A host that is not loopback needs plaintext said (or tls) to get as far as its lookup.
    `gateway: { host: ${gatewayHost}, port: ${p.gateway}, adminPort: ${p.admin}${gatewayHost === "127.0.0.1" ? "" : ", plaintext: true"} }
aggregator: { host: 127.0.0.1, port: ${p.aggregator}, metricsPort: ${p.metrics}, scrapeIntervalMs: 50, staleAfterMs: 1000 }
pools:
  - name: llama
    baseModel: llama-3.1-8b
    endpoints: ["127.0.0.1:${p.podA}", "127.0.0.1:${p.podB}"]
`,
  );
  writeFileSync(fleetOf(path), `pods:
  - { name: llama-a, pool: llama, port: ${p.podA} }
  - { name: llama-b, pool: llama, port: ${p.podB} }
`);
  return path;
}

/** The fake fleet writeConfig writes beside a config. */
const fleetOf = (config: string) => config.replace(/\.yaml$/, ".fleet.yaml");
/** The launcher's arguments for a config and its fake fleet. */
const gatewayArgs = (config: string) => ["--config", config, "--fleet", fleetOf(config)];

interface Started {
  launched: Launched;
  url: string;
  envoyPid: number;
  envoyLog: string;
}

async function startGateway(config: string): Promise<Started> {
  const launched = launchGateway([...gatewayArgs(config), "--run-dir", runDir]);
  const [, url] = await launched.waitForOutput(/^gateway ready at (\S+)$/m);
  const [, envoyPid] = /^envoy admin on \S+ \(pid (\d+)\)$/m.exec(launched.output())!;
  const [, envoyLog] = /^envoy log: (\S+)$/m.exec(launched.output())!;
  return { launched, url, envoyPid: Number(envoyPid), envoyLog };
}

async function chat(url: string): Promise<number> {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "llama-3.1-8b", max_tokens: 4, messages: [{ role: "user", content: "Hello" }] }),
    signal: AbortSignal.timeout(10_000),
  });
  await res.text();
  return res.status;
}

/** Envoy is gone and every port of the stack can be bound again. */
async function expectAllStopped(envoyPid: number, ports: Ports): Promise<void> {
  await waitFor(`Envoy pid ${envoyPid} to be gone`, () => !isRunning(envoyPid), 10_000);
  for (const [part, port] of Object.entries(ports)) {
    expect(await portIsFree(port), `${part} port ${port} is free`).toBe(true);
  }
}

describe("npm start", () => {
  it("refuses a second gateway on a taken port while the first keeps serving, and stops on SIGTERM", async () => {
    // Older runs' folders beyond the newest ten are pruned.
    for (let i = 10; i < 21; i++) mkdirSync(join(runDir, `20000101T0000${i}Z-1`), { recursive: true });
    const ports = await allocatePorts();
    const first = await startGateway(writeConfig(ports));
    expect(first.url).toBe(`http://127.0.0.1:${ports.gateway}`);
    expect(await chat(first.url)).toBe(200);

    // The log file is where the launcher said, in this run's folder, at info level;
    // the terminal only shows Envoy's warnings and above (checked after the stop, which logs one).
    expect(dirname(dirname(first.envoyLog))).toBe(runDir);
    expect(readFileSync(first.envoyLog, "utf8")).toMatch(/\]\[info\]\[main\] .*initializing epoch 0/);
    expect(first.launched.output()).not.toMatch(/^\[envoy\] .*\]\[info\]\[/m);
    const runs = readdirSync(runDir).sort();
    expect(runs).toHaveLength(10);
    expect(runs.at(-1)).toBe(basename(dirname(first.envoyLog)));

    // Same gateway port, everything else free: refused before anything starts.
    const other = await allocatePorts();
    const second = launchGateway([...gatewayArgs(writeConfig({ ...other, gateway: ports.gateway })), "--run-dir", runDir]);
    expect(await second.exitWithin(15_000)).toEqual({ code: 1, signal: null });
    expect(second.output()).toContain(`gateway.port ${ports.gateway} is already in use on 127.0.0.1 (is another gateway running?)`);
    expect(second.output()).not.toMatch(/^pod /m);
    // Envoy admin's port too.
    const third = launchGateway([...gatewayArgs(writeConfig({ ...other, admin: ports.admin })), "--run-dir", runDir]);
    expect(await third.exitWithin(15_000)).toEqual({ code: 1, signal: null });
    expect(third.output()).toContain(`gateway.adminPort ${ports.admin} is already in use on 127.0.0.1`);
    // Failed starts leave no empty run folders behind.
    expect(readdirSync(runDir).sort()).toEqual(runs);

    expect(await chat(first.url)).toBe(200);

    first.launched.child.kill("SIGTERM");
    expect(await first.launched.exitWithin(15_000)).toEqual({ code: 0, signal: null });
    expect(first.launched.output()).toMatch(/^SIGTERM: stopping$[\s\S]*^stopped$/m);
    await expectAllStopped(first.envoyPid, ports);
    expect(readFileSync(first.envoyLog, "utf8")).toContain("caught ENVOY_SIGTERM");
    expect(first.launched.output()).toMatch(/^\[envoy\] .*\]\[warning\]\[main\] .*caught ENVOY_SIGTERM/m);
    expect(first.launched.output()).not.toMatch(/^\[envoy\] .*\]\[info\]\[/m);
  }, 90_000);

  it("with gateway.jwt, says a token is needed and how to send it, and its readiness path answers without one", async () => {
    const ports = await allocatePorts();
    const config = writeConfig(ports);
    const { publicKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
    writeFileSync(join(dir, "jwks.json"), JSON.stringify({ keys: [{ ...publicKey.export({ format: "jwk" }), kid: "k", alg: "ES256" }] }));
    writeFileSync(config, readFileSync(config, "utf8").replace(/^gateway: \{ (.*) \}$/m, 'gateway: { $1, jwt: { issuer: "https://auth.test", jwksFile: jwks.json } }'));
    const started = await startGateway(config);
    expect(started.launched.output()).toMatch(/^try: curl .* -H "authorization: Bearer \$TOKEN" /m);
    expect(started.launched.output()).toMatch(/^JWT is on: every path but \/health needs a token from https:\/\/auth\.test \(.*docs\/jwt\.md\)$/m);
    await waitFor("/health to answer 200 without a token", async () => (await fetch(`${started.url}/health`)).status === 200);
    expect(await chat(started.url)).toBe(401);
    started.launched.child.kill("SIGTERM");
    expect(await started.launched.exitWithin(15_000)).toEqual({ code: 0, signal: null });
  }, 60_000);

  it("stops the same way on SIGHUP; gateway.host localhost listens on 127.0.0.1", async () => {
    const ports = await allocatePorts();
    const { launched, url, envoyPid, envoyLog } = await startGateway(writeConfig(ports, "localhost"));
    expect(url).toBe(`http://127.0.0.1:${ports.gateway}`);
    expect(await chat(url)).toBe(200);

    launched.child.kill("SIGHUP");
    expect(await launched.exitWithin(15_000)).toEqual({ code: 0, signal: null });
    expect(launched.output()).toMatch(/^SIGHUP: stopping$[\s\S]*^stopped$/m);
    await expectAllStopped(envoyPid, ports);
    expect(existsSync(envoyLog)).toBe(true);
  }, 60_000);

  it("leaves no Envoy behind when it is SIGKILLed", async () => {
    const ports = await allocatePorts();
    const { launched, envoyPid } = await startGateway(writeConfig(ports));
    launched.child.kill("SIGKILL");
    await launched.exitWithin(5_000);
    // No exit handler runs after SIGKILL: the watchdog stops Envoy.
    await expectAllStopped(envoyPid, ports);
  }, 60_000);

  it("stops the rest and exits 1 when Envoy dies on its own", async () => {
    const ports = await allocatePorts();
    const { launched, envoyPid, envoyLog } = await startGateway(writeConfig(ports));
    process.kill(envoyPid, "SIGKILL");
    expect(await launched.exitWithin(15_000)).toEqual({ code: 1, signal: null });
    expect(launched.output()).toMatch(/^envoy exited unexpectedly \(killed by a signal\); its log is in the file above$/m);
    expect(launched.output()).toMatch(/^envoy exited: stopping$[\s\S]*^stopped$/m);
    await expectAllStopped(envoyPid, ports);
    expect(existsSync(envoyLog)).toBe(true);
  }, 60_000);

  it("stops everything when its parent process dies", async () => {
    const ports = await allocatePorts();
    const config = writeConfig(ports);
    const shell = launch("/bin/sh", ["-c", `"$0" "$1" --config "$2" --fleet "$4" --run-dir "$3" & wait`, process.execPath, launcherPath, config, runDir, fleetOf(config)]);
    await shell.waitForOutput(/^gateway ready at /m);
    const launcherPid = Number(/^envoy log: \S+-(\d+)\/envoy\.log$/m.exec(shell.output())![1]);
    const envoyPid = Number(/\(pid (\d+)\)$/m.exec(shell.output())![1]);
    expect(isRunning(launcherPid)).toBe(true);

    shell.child.kill("SIGKILL");
    await waitFor("the launcher to exit", () => !isRunning(launcherPid), 15_000);
    expect(shell.output()).toMatch(/^parent process \d+ exited: stopping$[\s\S]*^stopped$/m);
    await expectAllStopped(envoyPid, ports);
  }, 60_000);

  it("applies an edit of its config file to the running gateway, and refuses one of a field only a restart can change", async () => {
    const ports = await allocatePorts();
    const config = writeConfig(ports);
    const { launched, url, envoyPid } = await startGateway(config);
    const original = readFileSync(config, "utf8");
    expect(launched.output()).toContain(`watching ${config} for changes`);

    writeFileSync(config, original.replace("baseModel: llama-3.1-8b", "baseModel: llama-3.1-8b\n    weights: { queue: 3 }"));
    await launched.waitForOutput(/^\[aggregator\] config reload applied: pool llama: weights$/m);
    writeFileSync(config, original.replace(`port: ${ports.gateway}`, `port: ${ports.gateway + 1}`));
    await launched.waitForOutput(/^\[aggregator\] config reload refused, the config in force stays: gateway\.port: is part of Envoy's bootstrap/m);
    expect(await chat(url)).toBe(200);

    launched.child.kill("SIGTERM");
    expect(await launched.exitWithin(15_000)).toEqual({ code: 0, signal: null });
    await expectAllStopped(envoyPid, ports);
  }, 60_000);

  it("refuses a host that does not resolve, naming the field, before starting anything", async () => {
    const ports = await allocatePorts();
    const launched = launchGateway([...gatewayArgs(writeConfig(ports, "no-such-host.invalid")), "--run-dir", runDir]);
    expect(await launched.exitWithin(15_000)).toEqual({ code: 1, signal: null });
    expect(launched.output()).toContain('gateway.host: cannot resolve "no-such-host.invalid"');
    expect(launched.output()).not.toMatch(/^(pod|envoy log) /m);
  });
});

describe("launcher signals (testing/launcher/shutdown.ts)", () => {
  /**
   * A process whose stop() never finishes, unless `timeoutMs` gives up on it.
   * The clock the shutdown reads stands still until SIGUSR2 moves it past the
   * repeat grace, so no test depends on how fast a signal arrives; a SIGINT
   * the shutdown did not exit on prints "SIGINT seen".
   */
  const hangingStop = (timeoutMs: number) =>
    launch(process.execPath, [
      "--input-type=module",
      "-e",
      `import { installShutdown, REPEAT_GRACE_MS } from ${JSON.stringify(pathToFileURL(join(projectRoot, "dist/testing/launcher/shutdown.js")).href)};
       let now = Date.now();
       Date.now = () => now;
       installShutdown({ stop: () => new Promise(() => {}), log: (line) => console.log(line), timeoutMs: ${timeoutMs} });
       process.on("SIGINT", () => console.log("SIGINT seen"));
       process.on("SIGUSR2", () => {
         now += REPEAT_GRACE_MS;
         console.log("clock moved");
       });
       setInterval(() => {}, 1000);
       console.log("ready");`,
    ]);

  it("ignores a duplicate signal right away, and exits 128+n on a second signal later", async () => {
    const p = hangingStop(60_000);
    await p.waitForOutput(/^ready$/m, 10_000);
    p.child.kill("SIGTERM");
    await p.waitForOutput(/^SIGTERM: stopping$/m, 5_000);
    // What npm does on Ctrl-C: it forwards the SIGINT the terminal sent us too.
    p.child.kill("SIGINT");
    await p.waitForOutput(/^SIGINT seen$/m, 5_000);
    expect(p.child.exitCode).toBeNull();
    p.child.kill("SIGUSR2");
    await p.waitForOutput(/^clock moved$/m, 5_000);
    p.child.kill("SIGINT");
    expect(await p.exitWithin(5_000)).toEqual({ code: 130, signal: null });
    expect(p.output()).toMatch(/^SIGINT again: exiting now$/m);
  });

  it("exits 1 when stopping takes longer than its timeout", async () => {
    const p = hangingStop(300);
    await p.waitForOutput(/^ready$/m, 10_000);
    p.child.kill("SIGHUP");
    expect(await p.exitWithin(5_000)).toEqual({ code: 1, signal: null });
    expect(p.output()).toMatch(/^SIGHUP: stopping\nstill stopping after 300 ms; exiting anyway$/m);
  });
});

describe("envoyWarningFilter", () => {
  it("keeps warning, error and critical lines and their continuation lines", () => {
    const keep = envoyWarningFilter();
    const line = (level: string) => `[2026-01-01 00:00:00.000][42][${level}][main] [source/server/server.cc:1] text`;
    expect([line("info"), line("debug"), line("warning"), line("error"), line("critical")].map(keep)).toEqual([false, false, true, true, true]);
    expect(keep("  e.yaml'")).toBe(true); // continues the critical line
    expect([line("info"), "  continued"].map(keep)).toEqual([false, false]);
    expect(envoyWarningFilter()("cannot bind '127.0.0.1:1': Address already in use")).toBe(true);
  });
});
