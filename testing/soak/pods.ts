// One fake model-server pod per process (testing/fakeserver's CLI with a
// one-pod file), so a failure is a real crash: SIGKILL, the kernel closes its
// sockets, streams under way are cut, and the pod comes back later on the
// same address as a restarted container would.
import type { WriteStream } from "node:fs";
import { join } from "node:path";
import type { Engine } from "../../host/config.js";
import type { PodSpec } from "../fakeserver/index.js";
import { startFleetProcess } from "../launcher/fleet-process.js";
import type { NodeChild } from "../launcher/node-child.js";

export interface PodProcessOptions {
  name: string;
  pool: string;
  model: string;
  adapters: string[];
  engine: Engine;
  port: number;
  /** Where its one-pod spec file goes. */
  dir: string;
  log: WriteStream;
}

export class PodProcess {
  readonly address: string;
  private child: NodeChild | null = null;
  private readonly spec: PodSpec;

  constructor(readonly opts: PodProcessOptions) {
    this.address = `127.0.0.1:${opts.port}`;
    this.spec = { name: opts.name, port: opts.port, model: opts.model, adapters: opts.adapters, metricsFormat: opts.engine };
  }

  get name(): string {
    return this.opts.name;
  }

  get pool(): string {
    return this.opts.pool;
  }

  /** The running process's pid; null while it is down. */
  get pid(): number | null {
    return this.child?.pid ?? null;
  }

  /** Starts the pod (again, after a crash) on its address; resolves once it listens. */
  async start(): Promise<void> {
    if (this.child) throw new Error(`pod ${this.name} is already running`);
    // --admin: GET /admin/state tells what the engine holds (Envoy's routes never reach it).
    const fleet = await startFleetProcess([this.spec], { specFile: join(this.opts.dir, `pod-${this.name}.json`), name: this.name, admin: true, log: this.opts.log });
    this.child = fleet.child;
  }

  /** A crash: SIGKILL. */
  async crash(): Promise<void> {
    const child = this.child;
    this.child = null;
    await child?.kill();
  }

  /** A clean stop (SIGTERM): the pod closes its server and exits. */
  async stop(): Promise<void> {
    const child = this.child;
    this.child = null;
    await child?.stop();
  }

  /** Requests the engine holds now (running + waiting). */
  async requestsHeld(): Promise<number> {
    const res = await fetch(`http://${this.address}/admin/state`);
    if (res.status !== 200) throw new Error(`pod ${this.name}: GET /admin/state answered ${res.status}`);
    const state = (await res.json()) as { numRunning: number; numWaiting: number };
    return state.numRunning + state.numWaiting;
  }
}
