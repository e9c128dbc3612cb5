/**
 * Runs simulations on several cores: each job (a scenario and its run
 * options) in its own worker thread, at most `concurrency` at once. A run is
 * a pure function of its inputs, so where it runs changes nothing in its
 * result. The worker is the compiled bench/sim/worker.js; running from the
 * TypeScript sources (under vitest) there is none, and jobs run in-process.
 */
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";
import type { Scenario } from "../scenario.js";
import type { RunOptions, ScenarioResult } from "../types.js";
import { runSim } from "./simulator.js";

export interface SimJob {
  scenario: Scenario;
  opts: Omit<RunOptions, "onProgress">;
}

export type JobProgress = (job: number, policy: string, fraction: number) => void;

/** What a worker posts: progress, then its result or its error. */
export type WorkerMessage =
  | { policy: string; fraction: number }
  | { result: ScenarioResult }
  | { error: string };

const WORKER = new URL("./worker.js", import.meta.url);

/** Whether jobs can run in worker threads here. */
export const canUseWorkers = (): boolean => existsSync(fileURLToPath(WORKER));

function inWorker(job: SimJob, onProgress: (policy: string, fraction: number) => void): Promise<ScenarioResult> {
  return new Promise((resolve, reject) => {
    const worker = new Worker(WORKER, { workerData: job });
    worker.on("message", (m: WorkerMessage) => {
      if ("result" in m) resolve(m.result);
      else if ("error" in m) reject(new Error(m.error));
      else onProgress(m.policy, m.fraction);
    });
    worker.on("error", reject);
    worker.on("exit", (code) => reject(new Error(`simulation worker exited with code ${code}`)));
  });
}

/** Starts every job; returns their results in job order, each settling as its job ends. */
export function startSimJobs(jobs: readonly SimJob[], concurrency: number, onProgress: JobProgress): Array<Promise<ScenarioResult>> {
  const parallel = concurrency > 1 && jobs.length > 1 && canUseWorkers();
  const limit = parallel ? concurrency : 1;
  let active = 0;
  const queued: Array<() => void> = [];
  const acquire = () => (active < limit ? (active++, Promise.resolve()) : new Promise<void>((go) => queued.push(go)));
  const release = () => (queued.length > 0 ? queued.shift()!() : active--);
  return jobs.map((job, i) =>
    acquire()
      .then(() => {
        const progress = (policy: string, fraction: number) => onProgress(i, policy, fraction);
        return parallel ? inWorker(job, progress) : runSim(job.scenario, { ...job.opts, onProgress: progress });
      })
      .finally(release),
  );
}
