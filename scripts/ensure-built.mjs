// Rebuilds the Wasm modules and the compiled host code when they are missing
// or older than their sources, and installs Envoy into .venv if needed, so
// `npm start` and `npm run bench` work right after `npm install`.
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

export const root = fileURLToPath(new URL("..", import.meta.url));

function newestMtime(dir) {
  let newest = 0;
  for (const entry of readdirSync(join(root, dir), { withFileTypes: true, recursive: true })) {
    if (entry.isFile()) newest = Math.max(newest, statSync(join(entry.parentPath, entry.name)).mtimeMs);
  }
  return newest;
}

function outdated(output, sourceDirs) {
  const path = join(root, output);
  if (!existsSync(path)) return true;
  const built = statSync(path).mtimeMs;
  return sourceDirs.some((dir) => newestMtime(dir) > built);
}

function run(script) {
  console.log(`> npm run ${script}`);
  const r = spawnSync("npm", ["run", "--silent", script], { cwd: root, stdio: "inherit" });
  if (r.status !== 0) process.exit(r.status ?? 1);
}

/** `envoy: false` skips installing Envoy, for runs that bring their own (ENVOY_BIN) or need none. */
export function ensureBuilt({ envoy = true } = {}) {
  if (!existsSync(join(root, "node_modules"))) {
    console.error("Dependencies are missing: run `npm install` first.");
    process.exit(1);
  }
  if (outdated("build/filter.wasm", ["assembly"]) || outdated("build/native.wasm", ["assembly"])) run("build:wasm");
  if (outdated("dist/host/cli/start.js", ["host", "bench", "fuzz"])) run("build:host");
  if (envoy) run("setup:envoy");
}
