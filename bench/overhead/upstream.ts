// Parent side of upstream-main.ts: the child process and its IPC messages.
import { forkChild } from "../child.js";

export type ParentMessage = { type: "take" } | { type: "stop" };
export type ChildMessage =
  | { type: "ready"; addresses: string[]; grpcPort: number }
  | { type: "hits"; hits: number[] };

export interface Upstream {
  readonly pid: number;
  /** "127.0.0.1:port" of every endpoint, in snapshot order. */
  readonly addresses: string[];
  /** The snapshot push and ADS server's port (the Envoy template's aggregator). */
  readonly grpcPort: number;
  /** Requests each endpoint answered since the last take(); resets the counts. */
  take(): Promise<number[]>;
  stop(): Promise<void>;
}

const ANSWER_TIMEOUT_MS = 20_000;

export async function startUpstream(endpoints: number): Promise<Upstream> {
  const child = forkChild<ParentMessage, ChildMessage>("upstream child", "overhead/upstream-main.js", [String(endpoints)], ANSWER_TIMEOUT_MS);
  try {
    const ready = await child.ask(null, "ready");
    return {
      pid: child.pid,
      addresses: ready.addresses,
      grpcPort: ready.grpcPort,
      take: async () => (await child.ask({ type: "take" }, "hits")).hits,
      stop: child.stop,
    };
  } catch (err) {
    await child.stop();
    throw err;
  }
}
