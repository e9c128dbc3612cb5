// Rebuilds the Wasm modules and the compiled host code when they are missing
// or older than their sources, and installs Envoy into .venv if needed, so
// `npm start` and `npm run bench` work right after `npm install`.
import "./require-node.mjs";
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

export const root = fileURLToPath(new URL("..", import.meta.url));

// Only what the compiler reads counts: bench/results/ and bench/charts/ are
// written by every bench run and must not trigger a rebuild.
function newestSource(dir) {
  let newest = 0;
  for (const entry of readdirSync(join(root, dir), { withFileTypes: true, recursive: true })) {
    if (entry.isFile() && entry.name.endsWith(".ts")) newest = Math.max(newest, statSync(join(entry.parentPath, entry.name)).mtimeMs);
  }
  return newest;
}

/** Whether `output` is missing or older than a .ts file under `sourceDirs` or the compiler's `configFile`. */
function outdated(output, sourceDirs, configFile) {
  const path = join(root, output);
  if (!existsSync(path)) return true;
  const built = statSync(path).mtimeMs;
  return statSync(join(root, configFile)).mtimeMs > built || sourceDirs.some((dir) => newestSource(dir) > built);
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
  if (outdated("build/filter.wasm", ["assembly"], "asconfig.json") || outdated("build/native.wasm", ["assembly"], "asconfig.json")) run("build:wasm");
  if (outdated("dist/testing/launcher/start.js", ["host", "testing", "bench", "fuzz"], "tsconfig.json")) run("build:host");
  if (envoy) run("setup:envoy");
}
