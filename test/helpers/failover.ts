// What a client and the filter see while the control plane fails over:
// loops of the official OpenAI client (plain and streamed, every failure
// kept with its time), and the filter's own account of its view (/health's
// snapshot_version and view_age_ms) sampled every few milliseconds.
import OpenAI from "openai";

export const ASK = { messages: [{ role: "user" as const, content: "Say hello" }], max_tokens: 4 };
const MAX_REQUESTS_PER_LOOP = 20_000;
const MAX_SAMPLES = 100_000;

export class ClientTraffic {
  ok = 0;
  readonly failures: string[] = [];
  /** Failures are reported relative to this (e.g. the time of a kill). */
  markMs = 0;
  private stopped = false;
  private loops: Promise<void>[] = [];

  constructor(readonly models: string[]) {}

  /** `loops` loops; the odd ones stream unless `streams` is false. */
  start(gatewayUrl: string, loops: number, { streams = true } = {}): void {
    for (let k = 0; k < loops; k++) this.loops.push(this.loop(k, gatewayUrl, streams && k % 2 === 1));
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await Promise.all(this.loops);
  }

  private async loop(k: number, gatewayUrl: string, stream: boolean): Promise<void> {
    const client = new OpenAI({ baseURL: `${gatewayUrl}/v1`, apiKey: "x", maxRetries: 0 });
    for (let i = 0; i < MAX_REQUESTS_PER_LOOP && !this.stopped; i++) {
      const model = this.models[(i + k) % this.models.length];
      try {
        if (!stream) {
          const r = await client.chat.completions.create({ model, ...ASK });
          if (r.choices[0].message.content === null) throw new Error("empty answer");
        } else {
          let chunks = 0;
          for await (const _ of await client.chat.completions.create({ model, ...ASK, stream: true })) chunks++;
          if (chunks < ASK.max_tokens) throw new Error(`stream ended after ${chunks} chunks`);
        }
        this.ok++;
      } catch (err) {
        this.failures.push(`${model} (${Date.now() - this.markMs} ms after the mark): ${(err as Error).message}`);
      }
    }
  }
}

export interface ViewSample {
  atMs: number;
  viewAgeMs: number;
  version: number;
}

export class ViewSampler {
  readonly samples: ViewSample[] = [];
  private stopped = false;
  private done: Promise<void> = Promise.resolve();

  start(gatewayUrl: string): void {
    this.done = this.run(gatewayUrl);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.done;
  }

  /**
   * When Envoy first held a snapshot of version `fromVersion` or later, heard
   * after `sinceMs` (Envoy's clock and ours are the same wall clock), or null.
   */
  firstSnapshotAfter(sinceMs: number, fromVersion: number): number | null {
    for (const s of this.samples) if (s.version >= fromVersion && s.atMs - s.viewAgeMs > sinceMs) return s.atMs - s.viewAgeMs;
    return null;
  }

  /** The oldest view the filter reported since `sinceMs`. */
  worstAgeSince(sinceMs: number): number {
    return Math.max(...this.samples.filter((s) => s.atMs >= sinceMs).map((s) => s.viewAgeMs));
  }

  private async run(gatewayUrl: string): Promise<void> {
    while (!this.stopped && this.samples.length < MAX_SAMPLES) {
      const body = (await (await fetch(`${gatewayUrl}/health`)).json()) as { view_age_ms: number | null; snapshot_version: number };
      if (body.view_age_ms !== null) this.samples.push({ atMs: Date.now(), viewAgeMs: body.view_age_ms, version: body.snapshot_version });
      await new Promise((r) => setTimeout(r, 5));
    }
  }
}

/** Resolves once a request for `model` is answered through the gateway (or rejects after `timeoutMs`). */
export async function answers(gatewayUrl: string, model: string, timeoutMs = 10_000): Promise<void> {
  const client = new OpenAI({ baseURL: `${gatewayUrl}/v1`, apiKey: "x", maxRetries: 0 });
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      if ((await client.chat.completions.create({ model, ...ASK })).choices[0].message.content !== null) return;
    } catch (err) {
      if (Date.now() > deadline) throw new Error(`${model} did not answer within ${timeoutMs} ms: ${(err as Error).message}`);
    }
    await new Promise((r) => setTimeout(r, 25));
  }
}
