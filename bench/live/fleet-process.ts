// The scenario's pods as real HTTP fake model servers, in a child process so
// their engines do not share an event loop with the load generator.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import type { PodSpec } from "../../testing/fakeserver/index.js";
import { projectRoot } from "../../host/paths.js";

export interface FleetProcess {
  /** "127.0.0.1:port" by pod name. */
  addresses: Map<string, string>;
  stop(): Promise<void>;
}

const READY_TIMEOUT_MS = 20_000;

export async function startFleetProcess(pods: PodSpec[]): Promise<FleetProcess> {
  const dir = mkdtempSync(join(tmpdir(), "bench-fleet-"));
  const file = join(dir, "pods.json");
  writeFileSync(file, JSON.stringify(pods));
  const child = spawn(process.execPath, [join(projectRoot, "dist", "testing", "fakeserver", "main.js"), "--pods", file], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const addresses = new Map<string, string>();
  const stop = async () => {
    await terminate(child);
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error("fake fleet did not become ready")), READY_TIMEOUT_MS);
      child.once("exit", (code) => reject(new Error(`fake fleet exited with code ${code}`)));
      createInterface({ input: child.stdout! }).on("line", (line) => {
        const pod = /^pod (\S+) \S+ http:\/\/(\S+)$/.exec(line);
        if (pod) addresses.set(pod[1], pod[2]);
        if (line === "fleet ready") {
          clearTimeout(timer);
          resolve();
        }
      });
    });
  } catch (err) {
    await stop();
    throw err;
  }
  return { addresses, stop };
}

function terminate(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const kill = setTimeout(() => child.kill("SIGKILL"), 5000);
    child.once("exit", () => {
      clearTimeout(kill);
      resolve();
    });
    child.kill("SIGTERM");
  });
}
