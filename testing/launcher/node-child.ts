// Node processes the benchmarks start (fake pods and fleets, the aggregator):
// each with its output read line by line (appended to a log file, or handed
// over), a line that says it is ready, and the exit-with-parent preload, so
// none outlives the process that started it.
import { spawn } from "node:child_process";
import { createWriteStream, type WriteStream } from "node:fs";
import { createInterface } from "node:readline";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { projectRoot } from "../../host/paths.js";

// The compiled file, also when the caller runs from source (vitest).
const PRELOAD = pathToFileURL(join(projectRoot, "dist", "testing", "launcher", "exit-with-parent.js")).href;
const READY_TIMEOUT_MS = 20_000;
const STOP_GRACE_MS = 5_000;

export interface NodeChild {
  readonly pid: number;
  /** Settles when the process has exited. */
  readonly exited: Promise<void>;
  /** A crash: SIGKILL, no chance to close anything. */
  kill(): Promise<void>;
  /** SIGTERM, then SIGKILL after a grace period. */
  stop(): Promise<void>;
}

export interface NodeChildOptions {
  /** The script and its arguments. */
  args: string[];
  /** Every line the child prints goes here, prefixed with `name` and the time. */
  log?: WriteStream;
  /** And here, as it is. */
  onLine?: (line: string) => void;
  name: string;
  /** Resolves the start once a line matches. */
  ready: RegExp;
}

/** Opens (appends to) a log file children share. */
export function openLog(path: string): WriteStream {
  return createWriteStream(path, { flags: "a" });
}

export async function startNodeChild(opts: NodeChildOptions): Promise<NodeChild> {
  const child = spawn(process.execPath, ["--import", PRELOAD, ...opts.args], { stdio: ["ignore", "pipe", "pipe", "ipc"] });
  // A process that could not be spawned emits 'error' and never 'exit'.
  const exited = new Promise<void>((resolve) => {
    child.once("exit", () => resolve());
    child.once("error", () => resolve());
  });
  let ready = false;
  const readyLine = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${opts.name} printed nothing matching ${opts.ready} within ${READY_TIMEOUT_MS} ms`)), READY_TIMEOUT_MS);
    void exited.then(() => {
      clearTimeout(timer);
      reject(new Error(`${opts.name} exited (code ${child.exitCode}, signal ${child.signalCode}) before it was ready`));
    });
    for (const stream of [child.stdout!, child.stderr!]) {
      createInterface({ input: stream }).on("line", (line) => {
        opts.log?.write(`${new Date().toISOString()} [${opts.name}] ${line}\n`);
        opts.onLine?.(line);
        if (!ready && opts.ready.test(line)) {
          ready = true;
          clearTimeout(timer);
          resolve();
        }
      });
    }
  });
  const stopped = (): boolean => child.exitCode !== null || child.signalCode !== null;
  const handle: NodeChild = {
    pid: child.pid!,
    exited,
    async kill() {
      if (!stopped()) child.kill("SIGKILL");
      await exited;
    },
    async stop() {
      if (stopped()) return;
      const force = setTimeout(() => child.kill("SIGKILL"), STOP_GRACE_MS);
      child.kill("SIGTERM");
      await exited;
      clearTimeout(force);
    },
  };
  try {
    await readyLine;
  } catch (err) {
    await handle.kill();
    throw err;
  }
  return handle;
}
