// Tests that need a tool a fresh clone does not have (docker-compose,
// Debian's prometheus, kubectl, the kube-apiserver built by
// scripts/kube/build-apiserver.sh) skip with the reason on a developer's
// machine, so `npm test` works from a fresh clone. CI installs every one of
// them first and sets LLM_GATEWAY_CI=1: there a missing tool fails the run
// instead of quietly skipping what it checks.
//
// Vitest runs every describe body while it collects the file, skipped or
// not: a suite that needs a tool calls it only in its hooks and tests.
import { spawnSync } from "node:child_process";

/** True when `command args` runs and exits 0; false when it is not installed (never throws). */
export function commandRuns(command: string, args: string[]): boolean {
  return spawnSync(command, args, { stdio: "ignore" }).status === 0;
}

/** True when the suite must skip: the tool is missing outside CI. Throws when it is missing in CI. */
export function skipWithout(available: boolean, suite: string, why: string): boolean {
  if (available) return false;
  if (process.env.LLM_GATEWAY_CI === "1") throw new Error(`${suite}: ${why} (CI installs it: see .ci/run)`);
  console.warn(`SKIPPED ${suite}: ${why}`);
  return true;
}
