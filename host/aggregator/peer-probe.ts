// Whether another aggregator's gRPC port answers: a TCP connect, closed at
// once. A refused connection is proof its process is gone (the host is up
// and nothing listens there); no answer in time proves nothing (a hung or
// partitioned peer may still think it leads).
import { connect } from "node:net";
import { parseEndpoint } from "../config.js";

export type ProbeResult = "alive" | "refused" | "silent";

export function probePeer(address: string, timeoutMs: number): Promise<ProbeResult> {
  const hp = parseEndpoint(address);
  if (!hp) return Promise.resolve("silent");
  return new Promise((resolve) => {
    const socket = connect({ host: hp.host, port: hp.port });
    const done = (result: ProbeResult) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(result);
    };
    const timer = setTimeout(() => done("silent"), timeoutMs);
    socket.once("connect", () => done("alive"));
    socket.once("error", (err: NodeJS.ErrnoException) => done(err.code === "ECONNREFUSED" ? "refused" : "silent"));
  });
}
