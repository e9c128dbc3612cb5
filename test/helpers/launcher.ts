// Runs the `npm start` launcher (dist/testing/launcher/start.js) as a child process
// and watches what it prints, the processes it starts and the ports it holds.
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import net from "node:net";
import { join } from "node:path";
import { projectRoot } from "../../host/paths.js";
import { stablePort, waitFor } from "./stack.js";

export const launcherPath = join(projectRoot, "dist", "testing", "launcher", "start.js");

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface Launched {
  readonly child: ChildProcess;
  /** stdout and stderr so far, interleaved as they arrived. */
  output(): string;
  /** Waits until the output matches `pattern`; fails early if the process exits first. */
  waitForOutput(pattern: RegExp, timeoutMs?: number): Promise<RegExpExecArray>;
  /** The exit, or a rejection after `timeoutMs`. */
  exitWithin(timeoutMs: number): Promise<Exit>;
}

const running = new Set<ChildProcess>();

/** Starts `command args` with its output captured; `killLaunched` ends what is left. */
export function launch(command: string, args: string[]): Launched {
  if (!existsSync(launcherPath)) throw new Error(`${launcherPath} is missing: run "npm run build" first`);
  const child = spawn(command, args, { cwd: projectRoot, stdio: ["ignore", "pipe", "pipe"] });
  running.add(child);
  let out = "";
  child.stdout!.setEncoding("utf8").on("data", (c: string) => (out += c));
  child.stderr!.setEncoding("utf8").on("data", (c: string) => (out += c));
  let exit: Exit | null = null;
  const exited = new Promise<Exit>((resolve) =>
    child.once("close", (code, signal) => {
      running.delete(child);
      resolve((exit = { code, signal }));
    }),
  );
  return {
    child,
    output: () => out,
    async waitForOutput(pattern, timeoutMs = 30_000) {
      let match: RegExpExecArray | null = null;
      await waitFor(`output matching ${pattern}`, () => {
        match = pattern.exec(out);
        if (!match && exit) throw new Error(`exited (${JSON.stringify(exit)}) before printing ${pattern}; output:\n${out}`);
        return match !== null;
      }, timeoutMs);
      return match!;
    },
    async exitWithin(timeoutMs) {
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`still running after ${timeoutMs} ms; output:\n${out}`)), timeoutMs);
      });
      try {
        return await Promise.race([exited, timeout]);
      } finally {
        clearTimeout(timer);
      }
    },
  };
}

/** The launcher itself: node dist/testing/launcher/start.js ARGS. */
export const launchGateway = (args: string[]) => launch(process.execPath, [launcherPath, ...args]);

/** SIGKILLs every process `launch` started that is still running (their Envoys' watchdogs do the rest). */
export function killLaunched(): void {
  for (const child of running) child.kill("SIGKILL");
}

/** `n` distinct free ports below the ephemeral range. */
export async function freePorts(n: number): Promise<number[]> {
  const ports = new Set<number>();
  while (ports.size < n) ports.add(await stablePort());
  return [...ports];
}

/** True while `pid` runs; a zombie waiting to be reaped counts as gone. */
export function isRunning(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2)[0] !== "Z";
  } catch {
    return false;
  }
}

/** True if nothing listens on 127.0.0.1:port (an exclusive bind succeeds). */
export function portIsFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = net.createServer();
    probe.once("error", () => resolve(false));
    probe.listen({ port, host: "127.0.0.1", exclusive: true }, () => probe.close(() => resolve(true)));
  });
}
