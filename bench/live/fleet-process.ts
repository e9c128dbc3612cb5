// The scenario's pods as real HTTP fake model servers, in a child process so
// their engines do not share an event loop with the load generator.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { PodSpec } from "../../testing/fakeserver/index.js";
import { startNodeChild } from "../../testing/launcher/node-child.js";
import { projectRoot } from "../../host/paths.js";

export interface FleetProcess {
  /** "127.0.0.1:port" by pod name. */
  addresses: Map<string, string>;
  stop(): Promise<void>;
}

export async function startFleetProcess(pods: PodSpec[]): Promise<FleetProcess> {
  const dir = mkdtempSync(join(tmpdir(), "bench-fleet-"));
  const file = join(dir, "pods.json");
  writeFileSync(file, JSON.stringify(pods));
  const addresses = new Map<string, string>();
  try {
    const child = await startNodeChild({
      args: [join(projectRoot, "dist", "testing", "fakeserver", "main.js"), "--pods", file],
      name: "fake fleet",
      ready: /^fleet ready$/,
      onLine: (line) => {
        const pod = /^pod (\S+) \S+ http:\/\/(\S+)$/.exec(line);
        if (pod) addresses.set(pod[1], pod[2]);
      },
    });
    return {
      addresses,
      stop: async () => {
        await child.stop();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
}
