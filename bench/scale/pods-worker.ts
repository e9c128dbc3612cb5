// Worker thread of the scale benchmark: fake vLLM metrics servers (pods
// first..first+count-1 of the fleet), one port each, on 127.0.0.1. Each answers every request on a kept-alive
// connection with its next page (testing/fakeserver/vllm-page.ts), over plain TCP
// so that serving thousands of pages a second stays cheap. The queue gauge
// of a page is its serial number (mod MARKERS), and the time it was served
// goes into shared memory, so the main thread can tell how old a snapshot
// entry's data is.
import { readlinkSync } from "node:fs";
import net from "node:net";
import { setPriority } from "node:os";
import { parentPort, workerData } from "node:worker_threads";
import { MARKERS, type PodsWorkerData } from "./pods.js";
import { VllmPage } from "../../testing/fakeserver/vllm-page.js";

const { first, count, served, servedAt } = workerData as PodsWorkerData;
const servedCounts = new Int32Array(served);
const servedTimes = new Float64Array(servedAt);
const REQUEST_END = "\r\n\r\n";

function startPod(i: number): Promise<number> {
  const page = new VllmPage(i);
  const server = net.createServer((socket) => {
    socket.setNoDelay(true);
    let unread = "";
    socket.on("data", (chunk: Buffer) => {
      unread += chunk.toString("latin1");
      for (let end = unread.indexOf(REQUEST_END); end >= 0; end = unread.indexOf(REQUEST_END)) {
        unread = unread.slice(end + REQUEST_END.length);
        const serial = Atomics.add(servedCounts, i, 1);
        const marker = serial % MARKERS;
        const now = performance.timeOrigin + performance.now();
        servedTimes[i * MARKERS + marker] = now;
        const parts = page.next(now / 1000, marker);
        const length = parts.reduce((n, p) => n + p.length, 0);
        socket.cork();
        socket.write(`HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: ${length}\r\n\r\n`);
        for (const p of parts) socket.write(p);
        socket.uncork();
      }
    });
    socket.on("error", () => {}); // the aggregator going away
  });
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve((server.address() as net.AddressInfo).port));
  });
}

/**
 * The fake pods take what CPU is left: below the aggregator and the Watch
 * client, whose timings are measured. Linux applies a priority given a
 * thread's id to that thread alone (/proc/thread-self names it); elsewhere
 * the pods keep the default priority.
 */
function yieldCpu(): void {
  try {
    setPriority(Number(readlinkSync("/proc/thread-self").split("/").pop()), 10);
  } catch {
    // not Linux: equal priority
  }
}

yieldCpu();
const ports: number[] = [];
for (let i = first; i < first + count; i++) ports.push(await startPod(i));
parentPort!.postMessage({ ports, pageBytes: Buffer.concat(new VllmPage(0).next(1.7e9, 0)).length });
