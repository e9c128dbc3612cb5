// Where scripts/llamacpp/build-llama-server.sh put llama.cpp's server, its
// gguf-py and their venv.
import { existsSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";

export const llamacppPrefix = process.env.LLAMACPP_PREFIX ?? join(homedir(), ".cache", "llama-cpp");
export const llamaServerBin = join(llamacppPrefix, "bin", "llama-server");
export const ggufPyDir = join(llamacppPrefix, "gguf-py");
export const modelWriterPython = join(llamacppPrefix, "venv", "bin", "python");

/** Null when everything is built, else what to run. */
export function llamacppMissing(): string | null {
  const missing = [llamaServerBin, join(ggufPyDir, "gguf"), modelWriterPython].filter((p) => !existsSync(p));
  return missing.length === 0 ? null : `missing ${missing.join(", ")}: run bash scripts/llamacpp/build-llama-server.sh (about 7 minutes the first time)`;
}
