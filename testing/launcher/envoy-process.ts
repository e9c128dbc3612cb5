import { spawn, type ChildProcess } from "node:child_process";
import { closeSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync, writeSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { findEnvoy } from "../../host/envoy/paths.js";
import { spawnWatchdog } from "./watchdog.js";

export interface StartEnvoyOptions {
  /** A complete Envoy bootstrap, e.g. from renderEnvoyConfig(). */
  configYaml: string;
  /** Worker threads (--concurrency); default 1. */
  concurrency?: number;
  /** Envoy log level (-l); default "warning". */
  logLevel?: string;
  /** --base-id; default allocateBaseId(). */
  baseId?: number;
  /** Called with every log line Envoy prints. */
  onLog?: (line: string) => void;
  /** Append everything Envoy prints to this file (its folder is created). */
  logFile?: string;
  /** Envoy binary; default findEnvoy(). */
  envoyBin?: string;
  /** How long to wait for LIVE and for the listeners; default 20 s. */
  readyTimeoutMs?: number;
}

export interface EnvoyProcess {
  readonly pid: number;
  readonly baseId: number;
  /** e.g. "http://127.0.0.1:41234" */
  readonly adminUrl: string;
  /** Listener name -> the "host:port" it is bound to (resolves port 0). */
  readonly listenerAddresses: Readonly<Record<string, string>>;
  /** Settles when Envoy has exited, stopped or not: its exit code, -1 after a signal. */
  readonly exited: Promise<number | null>;
  /** The most recent log lines (stdout and stderr). */
  recentLogs(): string[];
  /** Counters and gauges by name; `filter` is Envoy's regex on stat names. */
  stats(filter?: string): Promise<Record<string, number>>;
  /** SIGTERM, SIGKILL if still running after a bounded wait; removes the temp dir. Idempotent. */
  stop(): Promise<void>;
}

const LOG_LINES_KEPT = 200;
const LOG_LINES_IN_ERRORS = 40;
const STOP_GRACE_MS = 5_000;

// Envoy derives shared-memory and socket names from base_id * 10 in a
// uint32, so base ids above this wrap around and can collide.
const MAX_BASE_ID = Math.floor(0xffffffff / 10);
const IDS_PER_PROCESS = 100;
let baseIdCounter = 0;

/**
 * A base id no other test process is using at the same time: the pid picks a
 * block of 100, a counter picks the slot inside it. Hot restart is disabled
 * anyway (so no shared memory is created), which makes a clash harmless, but
 * distinct ids keep it that way if someone turns hot restart back on.
 */
export function allocateBaseId(): number {
  const block = process.pid % Math.floor((MAX_BASE_ID + 1) / IDS_PER_PROCESS);
  return block * IDS_PER_PROCESS + (baseIdCounter++ % IDS_PER_PROCESS);
}

const LEVELS = ["trace", "debug", "info", "warning", "error", "critical"];

/**
 * A predicate for lines at warning level or above, in Envoy's default format
 * `[time][thread][level][logger] ...`. A line without that prefix continues
 * the previous message (a multi-line error) or is raw stderr: it goes with
 * the previous line, and is kept when there was none.
 */
export function envoyWarningFilter(): (line: string) => boolean {
  let keep = true;
  return (line) => {
    const level = /^\[[^\]]*\]\[\d+\]\[(\w+)\]/.exec(line)?.[1];
    if (level !== undefined) keep = LEVELS.indexOf(level) >= LEVELS.indexOf("warning");
    return keep;
  };
}

/** Keeps the last lines of a child's output, splitting chunks into lines. */
class LogRing {
  private readonly lines: string[] = [];
  private partial = "";

  constructor(private readonly onLog?: (line: string) => void) {}

  push(chunk: string): void {
    const parts = (this.partial + chunk).split("\n");
    this.partial = parts.pop() ?? "";
    for (const line of parts) this.add(line);
  }

  flush(): void {
    if (this.partial) this.add(this.partial);
    this.partial = "";
  }

  tail(n = LOG_LINES_KEPT): string[] {
    return this.lines.slice(-n);
  }

  private add(line: string): void {
    this.lines.push(line);
    if (this.lines.length > LOG_LINES_KEPT) this.lines.shift();
    this.onLog?.(line);
  }
}

function withLogs(message: string, logs: LogRing): Error {
  const tail = logs.tail(LOG_LINES_IN_ERRORS);
  return new Error(tail.length ? `${message}\n--- last Envoy log lines ---\n${tail.join("\n")}` : message);
}

// Envoys still running when Node exits (a crashed test run) would hold their
// ports; kill them synchronously on the way out. Their watchdogs go first, so
// none of them signals a pid after it has been reaped.
const running = new Map<ChildProcess, ChildProcess | null>();
process.on("exit", () => {
  for (const [child, watchdog] of running) {
    watchdog?.kill("SIGKILL");
    child.kill("SIGKILL");
  }
});

// A SIGKILLed Node runs no exit handler, and Envoy has no option to die with
// its parent: a watchdog stops it then.
interface Spawned {
  child: ChildProcess;
  logs: LogRing;
  exited: Promise<number | null>;
  hasExited(): boolean;
}

interface FileSink {
  write(chunk: string): void;
  close(): void;
}

/** Appends raw output to a file; a failing write turns the file off and says so in the ring. */
function fileSink(path: string, logs: LogRing): FileSink {
  mkdirSync(dirname(path), { recursive: true });
  let fd: number | null = openSync(path, "a");
  const close = () => {
    if (fd !== null) closeSync(fd);
    fd = null;
  };
  return {
    write(chunk) {
      if (fd === null) return;
      try {
        // Synchronous, so nothing is lost when the process exits right after.
        writeSync(fd, chunk);
      } catch (err) {
        close();
        logs.push(`writing ${path} failed, no more lines go there: ${(err as Error).message}\n`);
      }
    },
    close,
  };
}

function spawnEnvoy(bin: string, args: string[], logs: LogRing, file: FileSink | null = null): Spawned {
  // Its own process group: a terminal's Ctrl-C reaches only us, and we stop
  // Envoy in order (the watchdog covers our own sudden death).
  const child = spawn(bin, args, { stdio: ["ignore", "pipe", "pipe"], detached: true });
  const watchdog = child.pid === undefined ? null : spawnWatchdog(child.pid, "envoy", (m) => logs.push(`${m}\n`));
  running.set(child, watchdog);
  let done = false;
  const onOutput = (c: string) => {
    file?.write(c);
    logs.push(c);
  };
  child.stdout!.setEncoding("utf8").on("data", onOutput);
  child.stderr!.setEncoding("utf8").on("data", onOutput);
  const finish = () => {
    watchdog?.kill("SIGKILL");
    done = true;
    running.delete(child);
    file?.close();
  };
  const exited = new Promise<number | null>((resolve) => {
    child.once("error", (err) => {
      logs.push(`spawn ${bin}: ${err.message}\n`);
      finish();
      resolve(null);
    });
    child.once("close", (code, signal) => {
      logs.flush();
      finish();
      resolve(code ?? (signal ? -1 : null));
    });
  });
  return { child, logs, exited, hasExited: () => done };
}

/** Waits for the process to exit, at most `ms`; true if it did. The timer never outlives the wait. */
async function exitsWithin(s: Spawned, ms: number): Promise<boolean> {
  const timer = new AbortController();
  try {
    return await Promise.race([
      s.exited.then(() => true),
      sleep(ms, false, { signal: timer.signal }),
    ]);
  } finally {
    timer.abort();
  }
}

async function terminate(s: Spawned): Promise<void> {
  if (s.hasExited()) return;
  s.child.kill("SIGTERM");
  if (!(await exitsWithin(s, STOP_GRACE_MS))) {
    s.child.kill("SIGKILL");
    await s.exited;
  }
}

function tcpAccepts(hostPort: string): Promise<boolean> {
  const i = hostPort.lastIndexOf(":");
  const host = hostPort.slice(0, i).replace(/^\[|\]$/g, "");
  const port = Number(hostPort.slice(i + 1));
  return new Promise((resolve) => {
    // A wildcard listener is reachable through loopback.
    const target = host === "0.0.0.0" ? "127.0.0.1" : host === "::" ? "::1" : host;
    const socket = connect({ host: target, port });
    const finish = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(1_000, () => finish(false));
    socket.once("connect", () => finish(true));
    socket.once("error", () => finish(false));
  });
}

async function fetchText(url: string): Promise<{ status: number; body: string }> {
  const res = await fetch(url, { signal: AbortSignal.timeout(2_000) });
  return { status: res.status, body: await res.text() };
}

interface ListenerStatus {
  name: string;
  local_address?: { socket_address?: { address: string; port_value: number } };
}

/** Polls until admin says LIVE and every listener accepts TCP; returns the listener addresses. */
async function waitReady(
  s: Spawned,
  adminPathFile: string,
  deadline: number,
): Promise<{ adminUrl: string; listeners: Record<string, string> }> {
  let adminUrl = "";
  for (;;) {
    if (s.hasExited()) throw withLogs(`Envoy exited during startup (code ${await s.exited})`, s.logs);
    if (Date.now() > deadline) throw withLogs("Envoy did not become ready in time", s.logs);
    try {
      if (!adminUrl) {
        const addr = readFileSync(adminPathFile, "utf8").trim();
        if (addr) adminUrl = `http://${addr}`;
      }
      if (adminUrl && (await fetchText(`${adminUrl}/ready`)).body.trim() === "LIVE") {
        const { body } = await fetchText(`${adminUrl}/listeners?format=json`);
        const statuses = (JSON.parse(body) as { listener_statuses?: ListenerStatus[] }).listener_statuses ?? [];
        const listeners: Record<string, string> = {};
        for (const l of statuses) {
          const sa = l.local_address?.socket_address;
          if (sa) listeners[l.name] = sa.address.includes(":") ? `[${sa.address}]:${sa.port_value}` : `${sa.address}:${sa.port_value}`;
        }
        const accepting = await Promise.all(Object.values(listeners).map(tcpAccepts));
        if (accepting.every(Boolean)) return { adminUrl, listeners };
      }
    } catch {
      // Not up yet: the address file is missing or admin refuses connections.
    }
    await sleep(50);
  }
}

const commonArgs = (configPath: string, baseId: number, logLevel: string) => [
  "-c",
  configPath,
  "--base-id",
  String(baseId),
  // No hot restart means no shared memory segment or domain socket, so
  // parallel instances cannot trip over each other's leftovers.
  "--disable-hot-restart",
  "-l",
  logLevel,
];

/** Starts Envoy and resolves once its admin reports LIVE and its listeners accept connections. */
export async function startEnvoy(opts: StartEnvoyOptions): Promise<EnvoyProcess> {
  const bin = opts.envoyBin ?? findEnvoy();
  const baseId = opts.baseId ?? allocateBaseId();
  const logs = new LogRing(opts.onLog);
  // Opened first: a log file that cannot be created leaves nothing behind.
  const file = opts.logFile === undefined ? null : fileSink(opts.logFile, logs);
  const dir = mkdtempSync(join(tmpdir(), "llm-gateway-envoy-"));
  const configPath = join(dir, "envoy.yaml");
  const adminPathFile = join(dir, "admin-address");
  writeFileSync(configPath, opts.configYaml);

  const s = spawnEnvoy(
    bin,
    [
      ...commonArgs(configPath, baseId, opts.logLevel ?? "warning"),
      "--concurrency",
      String(opts.concurrency ?? 1),
      "--admin-address-path",
      adminPathFile,
    ],
    logs,
    file,
  );

  let stopping: Promise<void> | undefined;
  const stop = (): Promise<void> =>
    (stopping ??= terminate(s).finally(() => rmSync(dir, { recursive: true, force: true })));

  let ready: { adminUrl: string; listeners: Record<string, string> };
  try {
    ready = await waitReady(s, adminPathFile, Date.now() + (opts.readyTimeoutMs ?? 20_000));
  } catch (err) {
    await stop();
    throw err;
  }

  return {
    pid: s.child.pid!,
    baseId,
    adminUrl: ready.adminUrl,
    listenerAddresses: ready.listeners,
    exited: s.exited,
    recentLogs: () => logs.tail(),
    async stats(filter?: string) {
      const query = filter === undefined ? "" : `&filter=${encodeURIComponent(filter)}`;
      const { status, body } = await fetchText(`${ready.adminUrl}/stats?format=json${query}`);
      if (status !== 200) throw new Error(`GET /stats returned ${status}: ${body}`);
      const out: Record<string, number> = {};
      // Histograms come as a separate entry without a numeric value; skip them.
      for (const st of (JSON.parse(body) as { stats: { name?: string; value?: unknown }[] }).stats) {
        if (st.name !== undefined && typeof st.value === "number") out[st.name] = st.value;
      }
      return out;
    },
    stop,
  };
}

/** Runs `envoy --mode validate` on a bootstrap; rejects with Envoy's output if it is not accepted. */
export async function validateEnvoyConfig(
  configYaml: string,
  opts: { envoyBin?: string; timeoutMs?: number } = {},
): Promise<void> {
  const bin = opts.envoyBin ?? findEnvoy();
  const dir = mkdtempSync(join(tmpdir(), "llm-gateway-envoy-validate-"));
  const configPath = join(dir, "envoy.yaml");
  writeFileSync(configPath, configYaml);
  const logs = new LogRing();
  const s = spawnEnvoy(bin, ["--mode", "validate", ...commonArgs(configPath, allocateBaseId(), "warning")], logs);
  try {
    const timeoutMs = opts.timeoutMs ?? 20_000;
    if (!(await exitsWithin(s, timeoutMs))) throw withLogs(`envoy --mode validate did not finish in ${timeoutMs} ms`, logs);
    const code = await s.exited;
    if (code !== 0) throw withLogs(`envoy --mode validate rejected the config (exit ${code})`, logs);
  } finally {
    await terminate(s);
    rmSync(dir, { recursive: true, force: true });
  }
}
