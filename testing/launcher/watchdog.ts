// A binary that cannot die with its parent (Envoy, llama-server) gets a
// watchdog: a shell reading a pipe whose only writer is this process. However
// we die (SIGKILL included) the kernel closes our end, `read` sees EOF, and
// the child gets SIGTERM, then SIGKILL if it is still there 5 s later. Kill
// the watchdog once the child has exited. It has its own process group, away
// from a terminal's Ctrl-C.
import { spawn, type ChildProcess } from "node:child_process";

const WATCHDOG_SCRIPT =
  'while read -r _; do :; done; kill -TERM "$1" 2>/dev/null || exit 0; ' +
  'for _ in 1 2 3 4 5; do sleep 1; kill -0 "$1" 2>/dev/null || exit 0; done; kill -KILL "$1" 2>/dev/null';

export function spawnWatchdog(pid: number, name: string, onError: (message: string) => void): ChildProcess {
  const watchdog = spawn("/bin/sh", ["-c", WATCHDOG_SCRIPT, `${name}-watchdog`, String(pid)], {
    stdio: ["pipe", "ignore", "ignore"],
    detached: true,
  });
  watchdog.once("error", (err) => onError(`${name} watchdog: ${err.message}`));
  // Neither the process nor its idle pipe may keep Node's event loop alive.
  watchdog.unref();
  (watchdog.stdin as unknown as { unref(): void }).unref();
  return watchdog;
}
