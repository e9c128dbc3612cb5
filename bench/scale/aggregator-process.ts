// Child process of the scale benchmark: the real aggregator alone in its
// process, so the CPU it reports is the aggregator's and not the fake pods'.
// Driven over IPC (aggregator-child.ts is the other end).
import { startAggregator, type Aggregator } from "../../host/aggregator/index.js";
import { NO_TELEMETRY, type AggregatorTelemetry } from "../../host/aggregator/telemetry.js";
import { parseGatewayConfig } from "../../host/config.js";
import type { ChildMessage, ParentMessage, TelemetryTotals } from "./aggregator-child.js";

const totals: TelemetryTotals = { cycles: 0, cycleCpuMs: 0, intervalMs: 0, pushes: 0, pushBytes: 0, scrapes: 0, scrapeErrors: 0 };
/** Push delays (the aggregator's own view) since the last sample. */
let pushDelaysMs: number[] = [];
const telemetry: AggregatorTelemetry = {
  ...NO_TELEMETRY,
  scrape(_pool, _pod, _seconds, error) {
    totals.scrapes++;
    if (error !== null) totals.scrapeErrors++;
  },
  discovery() {},
  snapshotPushed(bytes, delayMs) {
    totals.pushes++;
    totals.pushBytes += bytes;
    pushDelaysMs.push(delayMs);
  },
  cycle(cpuMs, intervalMs) {
    totals.cycles++;
    totals.cycleCpuMs += cpuMs;
    totals.intervalMs = intervalMs;
  },
  reload() {},
};

const send = (m: ChildMessage) => process.send!(m);
let aggregator: Aggregator | null = null;

process.on("message", (m: ParentMessage) => {
  void (async () => {
    try {
      if (m.type === "start") {
        aggregator = await startAggregator(parseGatewayConfig(m.yaml, "scale bench"), {
          port: 0,
          metricsPort: false,
          log: (line) => send({ type: "log", line }),
          telemetry,
        });
        send({ type: "ready", grpcPort: aggregator.grpcPort });
      } else if (m.type === "sample") {
        const cpu = process.cpuUsage();
        send({ type: "sample", cpuMs: (cpu.user + cpu.system) / 1000, rssBytes: process.memoryUsage.rss(), totals: { ...totals }, pushDelaysMs });
        pushDelaysMs = [];
      } else {
        await aggregator?.close();
        process.exit(0);
      }
    } catch (err) {
      send({ type: "error", message: (err as Error).message });
    }
  })();
});
