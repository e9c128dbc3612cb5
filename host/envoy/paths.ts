import { spawnSync } from "node:child_process";
import { accessSync, constants } from "node:fs";
import { delimiter, join } from "node:path";
import { projectRoot } from "../paths.js";

function isExecutable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * The Envoy binary to run: $ENVOY_BIN, else the project's own
 * .venv/bin/envoy (npm run setup:envoy), else `envoy` on PATH.
 */
export function findEnvoy(env: NodeJS.ProcessEnv = process.env, root: string = projectRoot): string {
  const fromEnv = env.ENVOY_BIN;
  if (fromEnv) {
    // An explicit choice that does not work is an error, not a reason to fall back.
    if (!isExecutable(fromEnv)) throw new Error(`ENVOY_BIN=${fromEnv} is not an executable file`);
    return fromEnv;
  }
  const venv = join(root, ".venv", "bin", "envoy");
  if (isExecutable(venv)) return venv;
  for (const dir of (env.PATH ?? "").split(delimiter)) {
    if (dir && isExecutable(join(dir, "envoy"))) return join(dir, "envoy");
  }
  throw new Error(
    `Envoy not found: ENVOY_BIN is not set, ${venv} does not exist (run "npm run setup:envoy"), ` +
      `and there is no "envoy" on PATH`,
  );
}

/** The version an Envoy binary reports (e.g. "1.40.0"), for the record in benchmark reports. */
export function envoyVersion(bin: string): string {
  const out = spawnSync(bin, ["--version"], { encoding: "utf8", timeout: 20_000 }).stdout ?? "";
  return /\/(\d+\.\d+\.\d+[^/\s]*)\//.exec(out)?.[1] ?? (out.trim() || "unknown");
}
