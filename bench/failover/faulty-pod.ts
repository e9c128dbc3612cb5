// A pod that breaks without looking broken: a reverse proxy in front of a
// fake pod. Until `break()` it passes everything through; afterwards it
// answers every completion at once with an HTTP 500, while /metrics still
// comes from the engine behind it, which, receiving no more work, soon
// reports an empty queue. To the aggregator it is then the most attractive
// pod of the pool.
import http from "node:http";
import type { AddressInfo } from "node:net";
import type { Pod } from "../../host/fakeserver/index.js";
import { REQUEST_INDEX_HEADER } from "./load.js";

export interface FaultyPod {
  /** The pod behind the proxy; its name is what x-served-by says. */
  readonly name: string;
  /** The proxy's "127.0.0.1:port": the pool endpoint. */
  readonly address: string;
  /** From now on, completions get a 500. */
  break(): void;
  /** Every completion answered with a 500: when it arrived (on the caller's clock) and the bench's request index. */
  readonly failures: ReadonlyArray<{ atMs: number; request: number | null }>;
  close(): Promise<void>;
}

const COMPLETIONS = /^\/v1\/(chat\/)?completions(\?|$)/;
const ENGINE_FAILURE = JSON.stringify({ error: { message: "engine failure", type: "server_error", param: null, code: null } });

export async function startFaultyPod(pod: Pod, clock: () => number): Promise<FaultyPod> {
  const agent = new http.Agent({ keepAlive: true });
  let broken = false;
  const failures: Array<{ atMs: number; request: number | null }> = [];

  const server = http.createServer((req, res) => {
    if (broken && req.method === "POST" && COMPLETIONS.test(req.url ?? "")) {
      const index = Number(req.headers[REQUEST_INDEX_HEADER]);
      failures.push({ atMs: clock(), request: Number.isInteger(index) ? index : null });
      req.resume().on("end", () => {
        res.writeHead(500, { "content-type": "application/json", "x-served-by": pod.name });
        res.end(ENGINE_FAILURE);
      });
      return;
    }
    const upstream = http.request(
      { host: "127.0.0.1", port: pod.port, method: req.method, path: req.url, headers: req.headers, agent },
      (up) => {
        res.writeHead(up.statusCode ?? 502, up.headers);
        up.pipe(res);
        // The pod cut its response: cut ours too, as a crash behind a proxy would.
        up.on("close", () => {
          if (!up.complete) res.destroy();
        });
      },
    );
    upstream.on("error", () => res.destroy());
    // Envoy abandoning an attempt must reach the engine, which then frees the slot.
    res.on("close", () => {
      if (!res.writableFinished) upstream.destroy();
    });
    req.pipe(upstream);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));

  return {
    name: pod.name,
    address: `127.0.0.1:${(server.address() as AddressInfo).port}`,
    break: () => {
      broken = true;
    },
    failures,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
        agent.destroy();
      }),
  };
}
