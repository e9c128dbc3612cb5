// A pod that breaks without looking broken, behind a reverse proxy that sees
// every completion attempt on it and when each one could first be seen to
// fail. The pod's own faults (Pod.setFault: hang, break-streams,
// stall-stream) pass through the proxy as they are; `break()` makes the proxy
// itself answer every completion at once with an HTTP 500. Either way /metrics
// still comes from the engine behind it, which, receiving no more work, soon
// reports an empty queue: to the aggregator it is then the most attractive
// pod of the pool.
import http from "node:http";
import type { AddressInfo } from "node:net";
import type { Pod } from "../fakeserver/index.js";
import { REQUEST_INDEX_HEADER } from "./load.js";

/** How long a response may keep the gateway waiting, as its profile's deadlines say. */
export interface Deadlines {
  /** From the attempt to its response headers. */
  firstByteMs: number;
  /** Between two bytes of a response that has started. */
  streamIdleMs: number;
}

export interface Attempt {
  /** When it reached the pod, on the caller's clock. */
  atMs: number;
  /** The bench's request index, null without one. */
  request: number | null;
  /**
   * When its failure could first be seen from the gateway: a 500, the pod cutting the response, a deadline
   * passing with no byte, or Envoy abandoning it before its end (at the latest when the deadline passed).
   * null: it has not failed.
   */
  failedAtMs: number | null;
}

export interface FaultyPod {
  /** The pod behind the proxy; its name is what x-served-by says. */
  readonly name: string;
  /** The proxy's "127.0.0.1:port": the pool endpoint. */
  readonly address: string;
  /** From now on, completions get a 500. */
  break(): void;
  /** Every completion attempt so far, in arrival order; an open one has failed once a deadline has passed. */
  attempts(): Attempt[];
  close(): Promise<void>;
}

const COMPLETIONS = /^\/v1\/(chat\/)?completions(\?|$)/;
const ENGINE_FAILURE = JSON.stringify({ error: { message: "engine failure", type: "server_error", param: null, code: null } });

/** One attempt's watch: the deadline it is held to moves with every byte of its response. */
class Watch {
  readonly attempt: Attempt;
  private deadlineMs: number;
  private open = true;

  constructor(atMs: number, request: number | null, private readonly deadlines: Deadlines) {
    this.attempt = { atMs, request, failedAtMs: null };
    this.deadlineMs = atMs + deadlines.firstByteMs;
  }

  /** Response headers or body bytes arrived. */
  bytes(nowMs: number): void {
    this.check(nowMs);
    this.deadlineMs = nowMs + this.deadlines.streamIdleMs;
  }

  /** The response is over: `failed` when it did not complete (cut, abandoned, or a 500). */
  end(nowMs: number, failed: boolean): void {
    if (!this.open) return;
    this.open = false;
    this.check(nowMs);
    if (failed) this.fail(Math.min(nowMs, this.deadlineMs));
  }

  /** The attempt as of `nowMs`: an open one whose deadline has passed has failed. */
  at(nowMs: number): Attempt {
    if (this.open) this.check(nowMs);
    return this.attempt;
  }

  private check(nowMs: number): void {
    if (nowMs > this.deadlineMs) this.fail(this.deadlineMs);
  }

  private fail(atMs: number): void {
    this.attempt.failedAtMs = Math.min(this.attempt.failedAtMs ?? Infinity, atMs);
  }
}

export async function startFaultyPod(pod: Pod, clock: () => number, deadlines: Deadlines): Promise<FaultyPod> {
  const agent = new http.Agent({ keepAlive: true });
  let broken = false;
  const watches: Watch[] = [];

  const server = http.createServer((req, res) => {
    let watch: Watch | null = null;
    if (req.method === "POST" && COMPLETIONS.test(req.url ?? "")) {
      const index = Number(req.headers[REQUEST_INDEX_HEADER]);
      watch = new Watch(clock(), Number.isInteger(index) ? index : null, deadlines);
      watches.push(watch);
      const w = watch;
      // Finished: the whole response went out; closed before that: cut by the pod, or abandoned by Envoy.
      res.on("close", () => w.end(clock(), !res.writableFinished));
    }
    if (broken && watch) {
      req.resume().on("end", () => {
        res.writeHead(500, { "content-type": "application/json", "x-served-by": pod.name });
        res.end(ENGINE_FAILURE);
        watch.end(clock(), true);
      });
      return;
    }
    const upstream = http.request(
      { host: "127.0.0.1", port: pod.port, method: req.method, path: req.url, headers: req.headers, agent },
      (up) => {
        watch?.bytes(clock());
        res.writeHead(up.statusCode ?? 502, up.headers);
        up.on("data", () => watch?.bytes(clock()));
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
    attempts: () => {
      const now = clock();
      return watches.map((w) => w.at(now));
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
        agent.destroy();
      }),
  };
}
