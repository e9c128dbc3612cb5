// The random-weight test models, written once per shape by make-model.py
// (llama.cpp's gguf-py) and kept beside the server build.
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, renameSync } from "node:fs";
import { join } from "node:path";
import { projectRoot } from "../../host/paths.js";
import { ggufPyDir, llamacppMissing, llamacppPrefix, modelWriterPython } from "./paths.js";

export interface ModelShape {
  /** Embedding width; 64 is ~0.7 MB and decodes in well under a millisecond a token. */
  width: number;
  layers: number;
  /** Trained context (tokens): the largest a slot may be given. */
  ctx: number;
  /** Words to make single tokens (the text a bench sends is made of them). */
  words?: readonly string[];
}

/** The tests' model: big enough to be a real llama, small enough that compute never dominates. */
export const TINY: ModelShape = { width: 64, layers: 2, ctx: 32768 };

/** The model file for `shape`, written the first time it is asked for. */
export function modelPath(shape: ModelShape = TINY): string {
  const missing = llamacppMissing();
  if (missing) throw new Error(missing);
  const dir = join(llamacppPrefix, "models");
  const words = shape.words ?? [];
  const vocab = words.length === 0 ? "" : `-v${createHash("sha1").update(words.join(",")).digest("hex").slice(0, 8)}`;
  const file = join(dir, `random-llama-w${shape.width}-l${shape.layers}-c${shape.ctx}${vocab}.gguf`);
  if (existsSync(file)) return file;
  mkdirSync(dir, { recursive: true });
  const part = `${file}.${process.pid}.part`;
  const r = spawnSync(
    modelWriterPython,
    [join(projectRoot, "testing", "llamacpp", "make-model.py"), part, "--width", String(shape.width), "--layers", String(shape.layers), "--ctx", String(shape.ctx), "--words", words.join(",")],
    { encoding: "utf8", env: { ...process.env, PYTHONPATH: ggufPyDir } },
  );
  if (r.status !== 0) throw new Error(`make-model.py failed (${r.status}): ${r.stderr}`);
  // Atomic, so parallel test files never load a half-written model.
  renameSync(part, file);
  return file;
}
