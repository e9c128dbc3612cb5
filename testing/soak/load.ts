// The soak's load: the planned mix sent open loop through the shared client
// (bench/load/), each request recorded as it goes.
import type OpenAI from "openai";
import { newClient, newRecord, send, type ClientRequest } from "../../bench/load/client.js";
import { openLoop } from "../../bench/load/open-loop.js";
import type { RequestRecord } from "../../bench/types.js";
import { planTraffic, type PlannedRequest } from "./traffic.js";

export type SoakRecord = RequestRecord<PlannedRequest>;

/** After the last arrival, requests still running this long are abandoned (timeouts). */
const DRAIN_LIMIT_MS = 30_000;
/** A request still running this long is given up as a timeout. */
const REQUEST_TIMEOUT_MS = 60_000;
// The user turns differ per request; the openings are shared, several blocks long.
const OPENINGS = Array.from({ length: 6 }, (_, k) => `You are assistant number ${k}. `.repeat(24));

/** A planned request as it goes on the wire. */
export function soakRequest(planned: PlannedRequest): ClientRequest {
  const opening = OPENINGS[planned.prefix % OPENINGS.length];
  const question = `Request ${planned.index}: answer in a few words.`;
  const { model, maxTokens: max_tokens, stream } = planned;
  const headers: Record<string, string> = planned.priority === null ? {} : { "x-llm-priority": planned.priority };
  switch (planned.kind) {
    case "completion":
      return { route: "completion", body: { model, prompt: opening + question, max_tokens }, stream, headers, expectedTokens: max_tokens };
    case "malformed-json":
      // Raw bytes go out as they are: a body cut off in the middle of a string.
      return { route: "chat", body: new TextEncoder().encode(`{"model":"${model}","messages":[{"role":"user","content":"${question}`), stream, headers };
    default: {
      const messages = [{ role: "system", content: opening }, { role: "user", content: question }];
      return { route: "chat", body: { model, messages, max_tokens }, stream, headers, expectedTokens: max_tokens };
    }
  }
}

export class Load {
  readonly records: SoakRecord[] = [];
  private readonly running = new Set<SoakRecord>();
  private readonly client: OpenAI;

  constructor(
    gatewayUrl: string,
    private readonly clock: () => number,
  ) {
    this.client = newClient(gatewayUrl, REQUEST_TIMEOUT_MS);
  }

  get runningCount(): number {
    return this.running.size;
  }

  /** Streams `pod` is sending: their 200 has arrived and their end has not. */
  streamsUnderway(pod: string): number {
    let n = 0;
    for (const r of this.running) if (r.stream && r.servedBy === pod && r.headersMs !== undefined) n++;
    return n;
  }

  /** Sends every request planned before `durationMs` (until `stopped`), then waits for them to end. */
  async run(seed: number, ratePerS: number, durationMs: number, stopped: () => boolean): Promise<void> {
    await openLoop(
      until(planTraffic(seed, ratePerS), durationMs),
      (planned, signal) => {
        const record = newRecord(planned, this.clock());
        this.records.push(record);
        this.running.add(record);
        return send(this.client, soakRequest(planned), record, { clock: this.clock, signal }).finally(() => this.running.delete(record));
      },
      { clock: this.clock, drainLimitMs: DRAIN_LIMIT_MS, stopped },
    );
  }
}

function* until(plan: Iterable<PlannedRequest>, endMs: number): Generator<PlannedRequest> {
  for (const p of plan) {
    if (p.atMs >= endMs) return;
    yield p;
  }
}
