// Where the project's files are, whether running from sources (vitest) or
// from dist/ (npm start).
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

function findRoot(from: string): string {
  let dir = from;
  while (!existsSync(join(dir, "package.json"))) {
    const up = dirname(dir);
    if (up === dir) throw new Error(`package.json not found above ${from}`);
    dir = up;
  }
  return dir;
}

export const projectRoot = findRoot(dirname(fileURLToPath(import.meta.url)));
export const protoPath = join(projectRoot, "proto", "gateway.proto");
export const filterWasmPath = join(projectRoot, "build", "filter.wasm");
export const nativeBindingsPath = join(projectRoot, "build", "native.js");
export const nativeWasmPath = join(projectRoot, "build", "native.wasm");

/** An installed npm package's version, for the record in benchmark reports. */
export function packageVersion(name: string): string {
  const pkg = JSON.parse(readFileSync(join(projectRoot, "node_modules", name, "package.json"), "utf8")) as { version: string };
  return pkg.version;
}
