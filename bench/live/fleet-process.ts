// The pods a live run sends to, and the scenario's pods as fake model
// servers in a child process of their own (testing/launcher/fleet-process.ts).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { PodSpec } from "../../testing/fakeserver/index.js";
import { startFleetProcess } from "../../testing/launcher/fleet-process.js";

/** The pods a live run sends to: fakes, or real model servers. */
export interface LiveFleet {
  /** "127.0.0.1:port" by pod name. */
  addresses: Map<string, string>;
  /** What the gateway must be told about real servers; absent for the fakes (vLLM dialect, the pool's defaults). */
  engine?: { engine: "llamacpp"; batchSlots: number };
  /** Prompt tokens the servers took from their cache and computed, by their own counters, where they export them. */
  serverCache?(): Promise<{ cachedTokens: number; processedTokens: number }>;
  stop(): Promise<void>;
}

export async function startFakeFleet(pods: PodSpec[]): Promise<LiveFleet> {
  const dir = mkdtempSync(join(tmpdir(), "bench-fleet-"));
  const removeDir = () => rmSync(dir, { recursive: true, force: true });
  try {
    const { child, addresses } = await startFleetProcess(pods, { specFile: join(dir, "pods.json"), name: "fake fleet" });
    return {
      addresses,
      stop: async () => {
        await child.stop();
        removeDir();
      },
    };
  } catch (err) {
    removeDir();
    throw err;
  }
}
