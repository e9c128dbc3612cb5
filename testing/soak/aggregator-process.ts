// The product's aggregator CLI (host/aggregator/main.js) as a process of its
// own, so its resident memory is its own, reading the soak's config file.
import type { WriteStream } from "node:fs";
import { join } from "node:path";
import { projectRoot } from "../../host/paths.js";
import { startNodeChild, type NodeChild } from "../launcher/node-child.js";

const AGGREGATOR_MAIN = join(projectRoot, "dist", "host", "aggregator", "main.js");

export class AggregatorProcess {
  private child: NodeChild | null = null;

  constructor(
    private readonly configPath: string,
    private readonly log: WriteStream,
  ) {}

  /** Null before it starts and after it stops. */
  get pid(): number | null {
    return this.child?.pid ?? null;
  }

  /** Settles when the process exits. */
  get exited(): Promise<void> {
    return this.child?.exited ?? Promise.resolve();
  }

  async start(): Promise<void> {
    this.child = await startNodeChild({
      args: [AGGREGATOR_MAIN, "--config", this.configPath],
      log: this.log,
      name: "aggregator",
      ready: /^aggregator listening grpc=/,
    });
  }

  async stop(): Promise<void> {
    const child = this.child;
    this.child = null;
    await child?.stop();
  }
}
