// One simulation job in a worker thread of the pool (pool.ts): posts its progress, then its result.
import { parentPort, workerData } from "node:worker_threads";
import type { SimJob, WorkerMessage } from "./pool.js";
import { runSim } from "./simulator.js";

const job = workerData as SimJob;
const post = (m: WorkerMessage) => parentPort!.postMessage(m);
try {
  post({ result: await runSim(job.scenario, { ...job.opts, onProgress: (policy, fraction) => post({ policy, fraction }) }) });
} catch (err) {
  post({ error: (err as Error).stack ?? String(err) });
}
