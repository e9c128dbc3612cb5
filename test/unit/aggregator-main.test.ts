// The aggregator as its own process (docker-compose, the Kubernetes
// Deployment, the soak run it so): a second one on the same ports is refused
// naming the field, and SIGTERM stops it cleanly.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { projectRoot } from "../../host/paths.js";
import { stablePort, waitFor } from "../helpers/stack.js";

const MAIN = join(projectRoot, "dist/host/aggregator/main.js");

interface Run {
  child: ChildProcess;
  output: () => string;
  exited: Promise<number | null>;
}

function run(configPath: string): Run {
  const child = spawn(process.execPath, [MAIN, "--config", configPath], { stdio: ["ignore", "pipe", "pipe"] });
  let text = "";
  for (const stream of [child.stdout!, child.stderr!]) stream.on("data", (chunk: Buffer) => (text += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  return { child, output: () => text, exited };
}

describe("the aggregator's own process", () => {
  const dir = mkdtempSync(join(tmpdir(), "aggregator-main-"));
  const runs: Run[] = [];

  afterAll(async () => {
    for (const r of runs) if (r.child.exitCode === null) r.child.kill("SIGKILL");
    rmSync(dir, { recursive: true, force: true });
  });

  it("refuses a second instance on its ports by field, and stops on SIGTERM", async () => {
    const [grpc, metrics] = [await stablePort(), await stablePort()];
    const configPath = join(dir, "gateway.yaml");
    writeFileSync(configPath, `aggregator: { host: 127.0.0.1, port: ${grpc}, metricsPort: ${metrics} }\npools:\n  - { name: p, baseModel: m, endpoints: ["127.0.0.1:1"] }\n`);

    const first = run(configPath);
    runs.push(first);
    await waitFor("the first aggregator listening", () => first.output().includes("aggregator listening grpc="), 15_000);

    const second = run(configPath);
    runs.push(second);
    expect(await second.exited).toBe(1);
    expect(second.output()).toContain(`aggregator.port ${grpc} is already in use on 127.0.0.1`);

    // The first one kept serving.
    expect(await (await fetch(`http://127.0.0.1:${metrics}/healthz`)).text()).toBe("ok\n");
    first.child.kill("SIGTERM");
    expect(await first.exited).toBe(0);
    expect(first.output()).toContain("SIGTERM: shutting down");
  }, 30_000);
});
