// The scale benchmark's fake pods: N metrics servers in a worker thread
// (pods-worker.ts), with what they served readable here: how many pages each
// pod served, and when it served the page whose queue gauge is a given marker.
import { join } from "node:path";
import { Worker } from "node:worker_threads";
import { projectRoot } from "../../host/paths.js";

/** Page serial numbers are taken mod this: the queue gauge, and a slot in the served-at ring. */
export const MARKERS = 1000;

export interface PodsWorkerData {
  count: number;
  /** Int32 per pod: pages served. */
  served: SharedArrayBuffer;
  /** Float64 per pod and marker: epoch ms (sub-ms) when that page was served. */
  servedAt: SharedArrayBuffer;
}

export interface FakePods {
  ports: number[];
  /** Bytes of one page. */
  pageBytes: number;
  /** Pages served so far, all pods. */
  served(): number;
  /** When pod `i` served the page with queue gauge `marker` (epoch ms), or undefined. */
  servedAt(i: number, marker: number): number | undefined;
  stop(): Promise<void>;
}

/** Epoch ms with sub-ms precision, comparable across threads. */
export const preciseNow = () => performance.timeOrigin + performance.now();

export async function startFakePods(count: number): Promise<FakePods> {
  const data: PodsWorkerData = {
    count,
    served: new SharedArrayBuffer(4 * count),
    servedAt: new SharedArrayBuffer(8 * count * MARKERS),
  };
  const served = new Int32Array(data.served);
  const servedAt = new Float64Array(data.servedAt);
  // The compiled worker: tests run from sources, but a worker needs a JavaScript file.
  const worker = new Worker(join(projectRoot, "dist", "bench", "scale", "pods-worker.js"), { workerData: data });
  const ready = await new Promise<{ ports: number[]; pageBytes: number }>((resolve, reject) => {
    worker.once("message", resolve);
    worker.once("error", reject);
    worker.once("exit", (code) => reject(new Error(`fake pods worker exited with code ${code}`)));
  });
  return {
    ...ready,
    served: () => {
      let total = 0;
      for (let i = 0; i < count; i++) total += Atomics.load(served, i);
      return total;
    },
    servedAt: (i, marker) => servedAt[i * MARKERS + marker] || undefined,
    stop: async () => {
      await worker.terminate();
    },
  };
}
