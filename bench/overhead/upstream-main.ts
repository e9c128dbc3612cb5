// Child process of the overhead benchmark: the instant upstream (one node:http
// server per endpoint port, each counting its requests) and the real snapshot
// push server, which also serves those ports to Envoy over ADS. It runs apart from the parent so the load generator does not
// share an event loop with the server it measures. Usage (via fork only):
//   upstream-main.js <endpoint count>
import { once } from "node:events";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { startSnapshotServer } from "../../host/aggregator/push.js";
import { createDiscoveryServer } from "../../host/aggregator/xds.js";
import type { ChildMessage, ParentMessage } from "./upstream.js";
import { benchSnapshot, BENCH_POOL, JSON_ANSWER, streamEvents } from "./workload.js";

const RESPONSE = JSON_ANSWER;
const RESPONSE_HEADERS = { "content-type": "application/json", "content-length": Buffer.byteLength(RESPONSE) };
const STREAM_EVENTS = streamEvents();
const STREAM_HEADERS = { "content-type": "text/event-stream", "cache-control": "no-cache" };
const STREAM_MARK = Buffer.from('"stream":true');

function send(msg: ChildMessage): void {
  process.send!(msg);
}

async function main(): Promise<void> {
  const count = Number(process.argv[2]);
  if (!Number.isInteger(count) || count < 1) throw new Error(`usage: upstream-main <endpoint count>, got ${process.argv[2]}`);

  const hits = new Array<number>(count).fill(0);
  const servers: Server[] = [];
  for (let i = 0; i < count; i++) {
    const server = createServer((req, res) => {
      let streamed = false;
      req.on("data", (data: Buffer) => (streamed ||= data.includes(STREAM_MARK)));
      req.on("end", () => {
        hits[i]++;
        if (!streamed) return void res.writeHead(200, RESPONSE_HEADERS).end(RESPONSE);
        // One write per event: each leaves as its own chunk (Envoy may still read several at once).
        res.writeHead(200, STREAM_HEADERS);
        for (const event of STREAM_EVENTS) res.write(event);
        res.end();
      });
    });
    // No idle timeout: Envoy keeps pooled connections between runs, and Node
    // closing one just as Envoy reuses it would show up as a spurious 503.
    server.keepAliveTimeout = 0;
    servers.push(server);
  }
  await Promise.all(servers.map((s) => once(s.listen(0, "127.0.0.1"), "listening")));
  const addresses = servers.map((s) => `127.0.0.1:${(s.address() as AddressInfo).port}`);

  const snapshot = benchSnapshot(addresses);
  // Envoy's pool cluster only has the hosts served over ADS, as from the aggregator.
  const discovery = createDiscoveryServer({ log: () => {} });
  discovery.setEndpoints(new Map([[BENCH_POOL, addresses]]));
  const snapshots = await startSnapshotServer({
    host: "127.0.0.1",
    port: 0,
    current: () => snapshot,
    log: () => {},
    services: [discovery.service],
  });

  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    discovery.close();
    await snapshots.close();
    for (const s of servers) {
      s.closeAllConnections();
      s.close();
    }
    process.exit(0);
  };
  process.on("disconnect", stop);
  process.on("message", (msg: ParentMessage) => {
    if (msg.type === "take") {
      send({ type: "hits", hits: hits.slice() });
      hits.fill(0);
    } else if (msg.type === "stop") {
      void stop();
    }
  });
  send({ type: "ready", addresses, grpcPort: snapshots.port });
}

main().catch((err: Error) => {
  process.stderr.write(`upstream-main: ${err.stack ?? err.message}\n`);
  process.exit(1);
});
