// A bench's helper process over IPC (the overhead bench's upstream, the scale
// bench's aggregator): forked from dist/, so it runs the same way under vitest
// and from the CLI; each answer goes to the oldest question still waiting.
import { fork } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { projectRoot } from "../host/paths.js";

export interface Child<Q extends { type: string }, A extends { type: string }> {
  pid: number;
  /** The next answer, which must be of `type`; `question` is sent first if given. An `error` answer, the child's exit or the timeout reject. */
  ask<T extends A["type"]>(question: Q | null, type: T): Promise<Extract<A, { type: T }>>;
  /** Sends { type: "stop" } and waits for the exit, killing the child after a grace period. */
  stop(): Promise<void>;
}

const STOP_GRACE_MS = 5_000;

/** `script`: its path under dist/bench/. `onOther`: answers that are no answer (log lines); true when handled. */
export function forkChild<Q extends { type: string }, A extends { type: string }>(name: string, script: string, args: string[], timeoutMs: number, onOther: (m: A) => boolean = () => false): Child<Q, A> {
  const entry = join(projectRoot, "dist", "bench", script);
  if (!existsSync(entry)) throw new Error(`${entry} is missing: run "npm run build:host" first`);
  // No inherited execArgv: the parent's flags (--input-type, vitest's loaders) are not meant for it.
  const child = fork(entry, args, { execArgv: [], stdio: ["ignore", "inherit", "inherit", "ipc"] });
  const waiters: Array<(m: A | null) => void> = [];
  child.on("message", (m: A) => {
    if (!onOther(m)) waiters.shift()?.(m);
  });
  const exited = new Promise<void>((resolve) =>
    child.once("exit", () => {
      for (const w of waiters.splice(0)) w(null);
      resolve();
    }),
  );
  const running = () => child.exitCode === null && child.signalCode === null;
  return {
    pid: child.pid!,
    ask: <T extends A["type"]>(question: Q | null, type: T) =>
      new Promise<Extract<A, { type: T }>>((resolve, reject) => {
        if (!running()) return reject(new Error(`${name} is not running`));
        const timer = setTimeout(() => reject(new Error(`${name}: no ${type} answer within ${timeoutMs} ms`)), timeoutMs);
        waiters.push((answer) => {
          clearTimeout(timer);
          if (answer?.type === type) return resolve(answer as Extract<A, { type: T }>);
          const error = answer as { type: string; message?: string } | null;
          reject(new Error(error === null ? `${name} exited (${child.signalCode ?? child.exitCode})` : error.type === "error" ? `${name}: ${error.message}` : `${name}: expected ${type}, got ${error.type}`));
        });
        if (question !== null) child.send(question);
      }),
    stop: async () => {
      if (!running()) return;
      if (child.connected) child.send({ type: "stop" });
      const kill = setTimeout(() => child.kill("SIGKILL"), STOP_GRACE_MS);
      await exited;
      clearTimeout(kill);
    },
  };
}
