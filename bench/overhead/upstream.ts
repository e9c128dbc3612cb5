// Parent side of upstream-main.ts: forks it from dist/ (so it runs the same
// way under vitest and from the CLI) and speaks its IPC messages.
import { fork } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { projectRoot } from "../../host/paths.js";

export type ParentMessage = { type: "take" } | { type: "stop" };
export type ChildMessage =
  | { type: "ready"; addresses: string[]; grpcPort: number }
  | { type: "hits"; hits: number[] };

export interface Upstream {
  readonly pid: number;
  /** "127.0.0.1:port" of every endpoint, in snapshot order. */
  readonly addresses: string[];
  /** The snapshot push and ADS server's port (the Envoy template's aggregator). */
  readonly grpcPort: number;
  /** Requests each endpoint answered since the last take(); resets the counts. */
  take(): Promise<number[]>;
  stop(): Promise<void>;
}

const entry = join(projectRoot, "dist", "bench", "overhead", "upstream-main.js");
const READY_TIMEOUT_MS = 20_000;
const STOP_GRACE_MS = 3_000;

export async function startUpstream(endpoints: number): Promise<Upstream> {
  if (!existsSync(entry)) throw new Error(`${entry} is missing: run "npm run build:host" first`);
  // No inherited execArgv: the parent's flags (--input-type, vitest's loaders) are not meant for it.
  const child = fork(entry, [String(endpoints)], { execArgv: [], stdio: ["ignore", "inherit", "inherit", "ipc"] });
  const waiting: Array<{ resolve: (hits: number[]) => void; reject: (err: Error) => void }> = [];
  let gone = false;
  const exited = new Promise<void>((resolve) =>
    child.once("exit", (code, signal) => {
      gone = true;
      for (const w of waiting.splice(0)) w.reject(new Error(`upstream child exited (${signal ?? code})`));
      resolve();
    }),
  );

  let onReady: ((msg: Extract<ChildMessage, { type: "ready" }>) => void) | undefined;
  child.on("message", (msg: ChildMessage) => {
    if (msg.type === "ready") onReady?.(msg);
    else waiting.shift()?.resolve(msg.hits);
  });

  const stop = async () => {
    if (gone) return;
    if (child.connected) child.send({ type: "stop" } satisfies ParentMessage);
    const timer = setTimeout(() => child.kill("SIGKILL"), STOP_GRACE_MS);
    await exited;
    clearTimeout(timer);
  };

  let ready: Extract<ChildMessage, { type: "ready" }>;
  try {
    ready = await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error("upstream child did not start in time")), READY_TIMEOUT_MS);
      onReady = (msg) => {
        clearTimeout(timer);
        resolve(msg);
      };
      void exited.then(() => {
        clearTimeout(timer);
        reject(new Error(`upstream child exited during startup (code ${child.exitCode})`));
      });
    });
  } catch (err) {
    await stop();
    throw err;
  }

  return {
    pid: child.pid!,
    addresses: ready.addresses,
    grpcPort: ready.grpcPort,
    take: () =>
      new Promise<number[]>((resolve, reject) => {
        if (gone || !child.connected) return reject(new Error("upstream child is not running"));
        waiting.push({ resolve, reject });
        child.send({ type: "take" } satisfies ParentMessage);
      }),
    stop,
  };
}
