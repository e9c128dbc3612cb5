// The scale benchmark's side of the aggregator child process
// (aggregator-process.ts): start it with a config, sample its CPU and
// telemetry, stop it.
import { fork, type ChildProcess } from "node:child_process";
import { join } from "node:path";
import { projectRoot } from "../../host/paths.js";

/** Counted from the aggregator's telemetry hooks since it started. */
export interface TelemetryTotals {
  cycles: number;
  /** Sum of cycle() CPU. */
  cycleCpuMs: number;
  /** The interval in force at the last cycle. */
  intervalMs: number;
  pushes: number;
  pushBytes: number;
  scrapes: number;
  scrapeErrors: number;
}

export type ParentMessage = { type: "start"; yaml: string } | { type: "sample" } | { type: "stop" };
export type ChildMessage =
  | { type: "ready"; grpcPort: number }
  | { type: "sample"; cpuMs: number; rssBytes: number; totals: TelemetryTotals; pushDelaysMs: number[] }
  | { type: "log"; line: string }
  | { type: "error"; message: string };

export interface AggregatorSample {
  /** The child's CPU so far (user + system). */
  cpuMs: number;
  /** Its resident memory now. */
  rssBytes: number;
  totals: TelemetryTotals;
  /** Each push since the previous sample: the oldest change it carried, ms before it went out (telemetry snapshotPushed). */
  pushDelaysMs: number[];
}

export interface AggregatorChild {
  grpcPort: number;
  sample(): Promise<AggregatorSample>;
  stop(): Promise<void>;
}

const START_TIMEOUT_MS = 60_000;

export async function startAggregatorChild(yaml: string, onLog: (line: string) => void): Promise<AggregatorChild> {
  const child: ChildProcess = fork(join(projectRoot, "dist", "bench", "scale", "aggregator-process.js"), [], { stdio: ["ignore", "inherit", "inherit", "ipc"] });
  // Each question gets the next answer; an error or the child's exit answers too.
  const waiters: Array<(m: ChildMessage | null) => void> = [];
  child.on("message", (m: ChildMessage) => {
    if (m.type === "log") onLog(m.line);
    else waiters.shift()?.(m);
  });
  const exited = new Promise<void>((resolve) =>
    child.once("exit", () => {
      for (const w of waiters.splice(0)) w(null);
      resolve();
    }),
  );
  const ask = <T extends ChildMessage["type"]>(m: ParentMessage, type: T): Promise<Extract<ChildMessage, { type: T }>> =>
    new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`aggregator child: no ${type} answer`)), START_TIMEOUT_MS);
      waiters.push((answer) => {
        clearTimeout(timer);
        if (answer?.type === type) resolve(answer as Extract<ChildMessage, { type: T }>);
        else reject(new Error(answer === null ? "aggregator child exited" : answer.type === "error" ? `aggregator: ${answer.message}` : `aggregator child: expected ${type}, got ${answer.type}`));
      });
      child.send(m);
    });
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.send({ type: "stop" });
      const kill = setTimeout(() => child.kill("SIGKILL"), 5000);
      await exited;
      clearTimeout(kill);
    }
  };
  try {
    const ready = await ask({ type: "start", yaml }, "ready");
    return {
      grpcPort: ready.grpcPort,
      sample: async () => {
        const s = await ask({ type: "sample" }, "sample");
        return { cpuMs: s.cpuMs, rssBytes: s.rssBytes, totals: s.totals, pushDelaysMs: s.pushDelaysMs };
      },
      stop,
    };
  } catch (err) {
    child.kill("SIGKILL");
    await exited;
    throw err;
  }
}
