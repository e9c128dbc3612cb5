// The scale benchmark's fake pods: N metrics servers in worker threads
// (pods-worker.ts), with what they served readable here: how many pages each
// pod served, and when it served the page whose queue gauge is a given marker.
import { join } from "node:path";
import { Worker } from "node:worker_threads";
import { projectRoot } from "../../host/paths.js";

/** Page serial numbers are taken mod this: the queue gauge, and a slot in the served-at ring. */
export const MARKERS = 1000;

/** Worker threads serving the pods: one serves some 6000 pages a second here, short of 1000 pods at 50 ms. */
const WORKERS = 2;

export interface PodsWorkerData {
  /** This worker's pods: `first` to `first + count - 1` of the fleet. */
  first: number;
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

function startWorker(data: PodsWorkerData): { worker: Worker; ready: Promise<{ ports: number[]; pageBytes: number }> } {
  // The compiled worker: tests run from sources, but a worker needs a JavaScript file.
  const worker = new Worker(join(projectRoot, "dist", "bench", "scale", "pods-worker.js"), { workerData: data });
  const ready = new Promise<{ ports: number[]; pageBytes: number }>((resolve, reject) => {
    worker.once("message", resolve);
    worker.once("error", reject);
    worker.once("exit", (code) => reject(new Error(`fake pods worker exited with code ${code}`)));
  });
  return { worker, ready };
}

export async function startFakePods(count: number): Promise<FakePods> {
  const shared = { served: new SharedArrayBuffer(4 * count), servedAt: new SharedArrayBuffer(8 * count * MARKERS) };
  const served = new Int32Array(shared.served);
  const servedAt = new Float64Array(shared.servedAt);
  const perWorker = Math.ceil(count / WORKERS);
  const workers = Array.from({ length: WORKERS }, (_, w) => ({ first: w * perWorker, count: Math.max(0, Math.min(perWorker, count - w * perWorker)) }))
    .filter((slice) => slice.count > 0)
    .map((slice) => startWorker({ ...slice, ...shared }));
  const stop = () => Promise.all(workers.map((w) => w.worker.terminate())).then(() => {});
  let ready;
  try {
    ready = await Promise.all(workers.map((w) => w.ready));
  } catch (err) {
    await stop();
    throw err;
  }
  return {
    ports: ready.flatMap((r) => r.ports),
    pageBytes: ready[0].pageBytes,
    served: () => {
      let total = 0;
      for (let i = 0; i < count; i++) total += Atomics.load(served, i);
      return total;
    },
    servedAt: (i, marker) => servedAt[i * MARKERS + marker] || undefined,
    stop,
  };
}
