// How the launcher stops: SIGINT (Ctrl-C), SIGTERM and SIGHUP all stop every
// part and exit 0 once everything has stopped; a second signal during that
// exits at once with 128 + its number (the process's exit handlers still
// SIGKILL Envoy). A launcher whose parent died (it was re-parented) stops too.
//
// A signal within REPEAT_GRACE_MS of the start of the stop is not a second
// one: on Ctrl-C under `npm start` the terminal signals the whole process
// group and npm forwards the same SIGINT to us.
import { constants } from "node:os";

export const STOP_SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP"] as const;
export const REPEAT_GRACE_MS = 1_000;

export interface ShutdownOptions {
  /** Stops everything that runs; called once. */
  stop: () => Promise<void>;
  log: (line: string) => void;
  /** Exit 1 if stop() has not finished by then; default 20 s. */
  timeoutMs?: number;
  /** How often to look for a new parent process; default 1 s. */
  parentCheckMs?: number;
}

export interface Shutdown {
  /** True once a stop has begun. */
  readonly stopping: boolean;
  /** Stops everything, then exits with `exitCode`; no-op when already stopping. */
  begin(reason: string, exitCode: number): void;
}

export function installShutdown(opts: ShutdownOptions): Shutdown {
  const timeoutMs = opts.timeoutMs ?? 20_000;
  let stopping = false;
  let stoppingSince = 0;

  function begin(reason: string, exitCode: number): void {
    if (stopping) return;
    stopping = true;
    stoppingSince = Date.now();
    opts.log(`${reason}: stopping`);
    setTimeout(() => {
      opts.log(`still stopping after ${timeoutMs} ms; exiting anyway`);
      process.exit(1);
    }, timeoutMs).unref();
    opts.stop().then(
      () => {
        opts.log("stopped");
        process.exit(exitCode);
      },
      (err: unknown) => {
        opts.log(`stopping failed: ${(err as Error).message}`);
        process.exit(1);
      },
    );
  }

  for (const signal of STOP_SIGNALS) {
    process.on(signal, () => {
      if (!stopping) return begin(signal, 0);
      if (Date.now() - stoppingSince < REPEAT_GRACE_MS) return;
      opts.log(`${signal} again: exiting now`);
      process.exit(128 + constants.signals[signal]);
    });
  }

  // Without prctl(PR_SET_PDEATHSIG) Node cannot ask to be told; a changed
  // ppid means the parent is gone (we now belong to init or a subreaper).
  const parent = process.ppid;
  setInterval(() => {
    if (process.ppid !== parent) begin(`parent process ${parent} exited`, 0);
  }, opts.parentCheckMs ?? 1_000).unref();

  return {
    get stopping() {
      return stopping;
    },
    begin,
  };
}
