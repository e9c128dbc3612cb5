// The scale benchmark's side of the aggregator child process
// (aggregator-process.ts): start it with a config, sample its CPU and
// telemetry, stop it.
import { forkChild } from "../child.js";

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

const ANSWER_TIMEOUT_MS = 60_000;

export async function startAggregatorChild(yaml: string, onLog: (line: string) => void): Promise<AggregatorChild> {
  const log = (m: ChildMessage) => {
    if (m.type === "log") onLog(m.line);
    return m.type === "log";
  };
  const child = forkChild<ParentMessage, ChildMessage>("aggregator child", "scale/aggregator-process.js", [], ANSWER_TIMEOUT_MS, log);
  try {
    const ready = await child.ask({ type: "start", yaml }, "ready");
    return {
      grpcPort: ready.grpcPort,
      sample: async () => {
        const s = await child.ask({ type: "sample" }, "sample");
        return { cpuMs: s.cpuMs, rssBytes: s.rssBytes, totals: s.totals, pushDelaysMs: s.pushDelaysMs };
      },
      stop: child.stop,
    };
  } catch (err) {
    await child.stop();
    throw err;
  }
}
