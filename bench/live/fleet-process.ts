// The scenario's pods as real HTTP fake model servers, in a child process so
// their engines do not share an event loop with the load generator.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { PodSpec } from "../../testing/fakeserver/index.js";
import { startNodeChild } from "../../testing/launcher/node-child.js";
import { projectRoot } from "../../host/paths.js";

/** The pods a live run sends to: fakes, or real model servers. */
export interface LiveFleet {
  /** "127.0.0.1:port" by pod name. */
  addresses: Map<string, string>;
  /** What the gateway must be told about real servers; absent for the fakes (vLLM dialect, the pool's defaults). */
  engine?: { engine: "llamacpp"; batchSlots: number };
  /** Prompt tokens the servers took from their cache and computed, by their own counters, where they export them. */
  serverCache?(): Promise<ServerCache>;
  stop(): Promise<void>;
}

export interface ServerCache {
  cachedTokens: number;
  processedTokens: number;
}

export async function startFleetProcess(pods: PodSpec[]): Promise<LiveFleet> {
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
