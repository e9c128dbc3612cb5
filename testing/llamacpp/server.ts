// One real llama.cpp server (llama-server) on loopback: started on a port of
// its own, ready once /health answers 200, and driven as the tests' faults
// need: killed, frozen (SIGSTOP), thawed, restarted on the same port. Its
// Prometheus page is on the API port (--metrics), as the aggregator expects.
import { spawn, type ChildProcess } from "node:child_process";
import net from "node:net";
import { spawnWatchdog } from "../launcher/watchdog.js";
import { modelPath, TINY, type ModelShape } from "./model.js";
import { llamaServerBin } from "./paths.js";

export interface LlamaServerOptions {
  name: string;
  /** The model name it serves (--alias); llama-server answers any name, the gateway routes by it. */
  alias: string;
  /** Parallel slots (-np): its batch. Default 4, llama-server's own. */
  slots?: number;
  /** Context per slot, in tokens: prompt plus output must fit. Default 8192. */
  ctxPerSlot?: number;
  /** CPU threads for compute (-t). Default 1: several pods share the machine's cores. */
  threads?: number;
  model?: ModelShape;
  /**
   * The host-memory prompt cache beside the slots, in MiB (llama.cpp's
   * default is 8 GiB). 0: the slots' own KV is the whole cache, as a GPU's
   * KV budget is.
   */
  cacheRamMiB?: number;
  /** Default: a free loopback port. */
  port?: number;
}

export interface LlamaServer {
  readonly name: string;
  readonly port: number;
  /** "127.0.0.1:port" */
  readonly address: string;
  readonly url: string;
  readonly slots: number;
  /** Sends a signal as is (SIGSTOP hangs it, SIGCONT resumes it). */
  signal(sig: NodeJS.Signals): void;
  /** SIGKILL, resolved once it is gone. */
  kill(): Promise<void>;
  /** SIGTERM, then SIGKILL after 5 s. */
  stop(): Promise<void>;
  /** Starts it again on the same port, after it was killed or stopped. */
  restart(): Promise<void>;
  /** Its /metrics samples, by name (it exports no labels). */
  metrics(): Promise<Record<string, number>>;
  /** The last lines it printed. */
  logs(): string;
}

const READY_TIMEOUT_MS = 60_000;
const LOG_LINES = 200;

async function freePort(): Promise<number> {
  const probe = net.createServer();
  await new Promise<void>((r) => probe.listen(0, "127.0.0.1", r));
  const { port } = probe.address() as net.AddressInfo;
  await new Promise<void>((r) => probe.close(() => r()));
  return port;
}

async function healthy(url: string): Promise<boolean> {
  try {
    const res = await fetch(`${url}/health`, { signal: AbortSignal.timeout(1000) });
    await res.arrayBuffer();
    return res.status === 200;
  } catch {
    return false;
  }
}

/** Prometheus text without labels, as llama-server writes it, to numbers by name. */
export function parseLlamaMetrics(text: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const line of text.split("\n")) {
    const m = /^([a-zA-Z_:][\w:]*) (\S+)$/.exec(line);
    if (m) out[m[1]] = Number(m[2]);
  }
  return out;
}

export async function startLlamaServer(opts: LlamaServerOptions): Promise<LlamaServer> {
  const slots = opts.slots ?? 4;
  const port = opts.port ?? (await freePort());
  const url = `http://127.0.0.1:${port}`;
  const args = [
    "-m", modelPath(opts.model ?? TINY),
    "--host", "127.0.0.1", "--port", String(port),
    "--alias", opts.alias,
    "--metrics",
    "-np", String(slots),
    "-c", String(slots * (opts.ctxPerSlot ?? 8192)),
    "-t", String(opts.threads ?? 1),
    "--no-webui",
    // Random weights can sample EOS at any step; every request runs its whole
    // max_tokens instead, so a trace's lengths are the ones it asked for.
    "--ignore-eos",
    "--cache-ram", String(opts.cacheRamMiB ?? 256),
  ];
  const lines: string[] = [];
  let child: ChildProcess | null = null;
  let watchdog: ChildProcess | null = null;
  let exited: Promise<void> = Promise.resolve();

  const launch = async () => {
    const c = spawn(llamaServerBin, args, { stdio: ["ignore", "pipe", "pipe"], detached: true });
    child = c;
    exited = new Promise<void>((resolve) => c.once("exit", () => resolve()));
    c.once("error", (err) => lines.push(`spawn ${llamaServerBin}: ${err.message}`));
    for (const stream of [c.stdout!, c.stderr!]) {
      stream.setEncoding("utf8");
      stream.on("data", (chunk: string) => {
        lines.push(...chunk.split("\n").filter((l) => l !== ""));
        if (lines.length > LOG_LINES) lines.splice(0, lines.length - LOG_LINES);
      });
    }
    watchdog = c.pid === undefined ? null : spawnWatchdog(c.pid, "llama-server", (m) => lines.push(m));
    void exited.then(() => watchdog?.kill("SIGKILL"));
    const deadline = Date.now() + READY_TIMEOUT_MS;
    let gone = false;
    void exited.then(() => (gone = true));
    while (!(await healthy(url))) {
      if (gone || Date.now() > deadline) {
        c.kill("SIGKILL");
        throw new Error(`llama-server ${opts.name} on ${url} ${gone ? "exited" : "was not healthy in time"}:\n${lines.slice(-20).join("\n")}`);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  };

  const kill = async (sig: NodeJS.Signals) => {
    const c = child;
    if (!c || c.exitCode !== null || c.signalCode !== null) return;
    if (sig === "SIGTERM") c.kill("SIGCONT");
    c.kill(sig);
    const timer = sig === "SIGTERM" ? setTimeout(() => c.kill("SIGKILL"), 5000) : null;
    await exited;
    if (timer) clearTimeout(timer);
  };

  await launch();
  return {
    name: opts.name,
    port,
    address: `127.0.0.1:${port}`,
    url,
    slots,
    signal: (sig) => void child?.kill(sig),
    kill: () => kill("SIGKILL"),
    stop: () => kill("SIGTERM"),
    restart: async () => {
      await kill("SIGKILL");
      await launch();
    },
    metrics: async () => {
      const res = await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(5000) });
      return parseLlamaMetrics(await res.text());
    },
    logs: () => lines.join("\n"),
  };
}

/** Several pods, started one after another (each loads its model on the shared cores). */
export async function startLlamaFleet(pods: LlamaServerOptions[]): Promise<{ pods: LlamaServer[]; stop(): Promise<void> }> {
  const started: LlamaServer[] = [];
  const stop = async () => {
    await Promise.all(started.map((p) => p.stop()));
  };
  try {
    for (const p of pods) started.push(await startLlamaServer(p));
  } catch (err) {
    await stop();
    throw err;
  }
  return { pods: started, stop };
}
