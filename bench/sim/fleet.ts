/**
 * The simulated fleet: one engine model per pod, all on the simulator's
 * clock, plus what a proxy in front of them can count (requests in flight)
 * and each request's outcome.
 */
import { Engine, RequestRejectedError, type EngineEvent } from "../../testing/engine/index.js";
import { podEngine, type Scenario } from "../scenario.js";
import type { EngineTotals, RequestError, RunRecord } from "../types.js";
import type { TraceRequest } from "./workload.js";

/** A request left `pod` at time t: finished, aborted, or refused up front. */
export type FinishedHandler = (request: TraceRequest, pod: number, t: number) => void;

export interface SimPod {
  index: number;
  name: string;
  /** ip:port as the gateway addresses it (a label: nothing is sent anywhere). */
  address: string;
  /** Index into scenario.models. */
  pool: number;
  engine: Engine;
  /** Whether the server runs with LoRA enabled (vLLM exports lora_requests_info only then). */
  loraEnabled: boolean;
}

/** A request on a pod, as the simulator sees it with no delay. */
export interface Outstanding {
  request: TraceRequest;
  pod: number;
  promptTokens: number;
  firstTokenMs: number | undefined;
  tokensOut: number;
  /** When this attempt reached the gateway: the request's arrival, or its retry's. */
  attemptMs: number;
}

/** A record's error until its request is decided: none is left so at the end of a run. */
const NOT_ROUTED: RequestError = { kind: "no_response", message: "not routed" };

function podAddress(index: number): string {
  return `127.1.${index >> 8}.${(index & 255) + 1}:8000`;
}

export class SimFleet {
  readonly pods: SimPod[] = [];
  /** Pod indices per pool (scenario model). */
  readonly pools: number[][];
  readonly records: RunRecord[];
  private readonly inFlightCount: number[];
  private readonly outstandingByPod: Map<string, Outstanding>[];
  private readonly byId = new Map<string, Outstanding>();
  /** Pods whose engine may hold events not yet collected (a submit settles steps too). */
  private readonly dirty: boolean[];
  private readonly finishedHandlers: FinishedHandler[] = [];
  private readonly firstTokenHandlers: FinishedHandler[] = [];

  constructor(scenario: Scenario, requests: readonly TraceRequest[]) {
    this.pools = scenario.models.map(() => []);
    for (const group of scenario.fleet) {
      const pool = scenario.models.findIndex((m) => m.name === group.model);
      for (let i = 0; i < group.count; i++) {
        const index = this.pods.length;
        this.pods.push({
          index,
          name: `${group.name}-${i}`,
          address: podAddress(index),
          pool,
          engine: new Engine(podEngine(scenario, group), 0),
          loraEnabled: scenario.models[pool].adapters !== undefined,
        });
        this.pools[pool].push(index);
      }
    }
    this.inFlightCount = this.pods.map(() => 0);
    this.outstandingByPod = this.pods.map(() => new Map());
    this.dirty = this.pods.map(() => false);
    this.records = requests.map((r) => ({
      atMs: r.arrivalMs,
      priority: r.priority,
      sentMs: r.arrivalMs,
      servedBy: null,
      error: NOT_ROUTED,
      promptTokens: 0,
      cachedTokens: 0,
      outputTokens: 0,
    }));
  }

  /** Requests the proxy has sent to `pod` and not yet seen complete (Envoy's active requests). */
  inFlight(pod: number): number {
    return this.inFlightCount[pod];
  }

  outstanding(pod: number): Iterable<Outstanding> {
    return this.outstandingByPod[pod].values();
  }

  /** Calls `handler` whenever a request leaves its pod, as a proxy sees its stream end. */
  onFinished(handler: FinishedHandler): void {
    this.finishedHandlers.push(handler);
  }

  /** Called when a request's first token leaves its pod (a stream's first bytes). */
  onFirstToken(handler: FinishedHandler): void {
    this.firstTokenHandlers.push(handler);
  }

  /** Adapter loads and preemptions, summed over the pods' engines. */
  engineTotals(): EngineTotals {
    const totals = { adapterLoads: 0, preemptions: 0 };
    for (const p of this.pods) {
      const c = p.engine.metrics().counters;
      totals.adapterLoads += c.loraLoads;
      totals.preemptions += c.preemptions;
    }
    return totals;
  }

  /** Runs every engine up to t and books the results. */
  advanceTo(t: number): void {
    for (const pod of this.pods) {
      if (!this.dirty[pod.index] && pod.engine.nextEventTime() > t) continue;
      this.dirty[pod.index] = false;
      for (const ev of pod.engine.advanceTo(t)) this.book(ev);
    }
  }

  /**
   * Sends the request to the pod at time t; an up-front rejection is booked
   * as the pod's 400. `attemptMs`: when this attempt reached the gateway (a
   * retry's arrival), where its latencies start.
   */
  submit(request: TraceRequest, pod: number, prompt: string, t: number, attemptMs = request.arrivalMs): void {
    const record = this.records[request.index];
    record.servedBy = this.pods[pod].name;
    record.sentMs = attemptMs;
    const id = String(request.index);
    try {
      const promptTokens = this.pods[pod].engine.submit({ id, prompt, maxTokens: request.maxTokens, adapter: request.adapter }, t);
      this.dirty[pod] = true;
      const o: Outstanding = { request, pod, promptTokens, firstTokenMs: undefined, tokensOut: 0, attemptMs };
      this.byId.set(id, o);
      this.outstandingByPod[pod].set(id, o);
      this.inFlightCount[pod]++;
      record.error = undefined;
    } catch (err) {
      if (!(err instanceof RequestRejectedError)) throw err;
      record.error = { kind: "status", status: 400, code: err.code, message: err.message };
      for (const h of this.finishedHandlers) h(request, pod, t);
    }
  }

  /** The gateway answered the attempt arriving at t itself (no endpoint, or a refusal) with `status`. */
  reject(request: TraceRequest, status: number, t: number): void {
    const record = this.records[request.index];
    record.sentMs = t;
    record.error = { kind: "status", status, message: `the gateway answered ${status}` };
  }

  /** The client's first attempt was refused with this Retry-After (s; null: none given). */
  noteRefusal(request: TraceRequest, retryAfterS: number | null): void {
    this.records[request.index].firstRefusal = { retryAfterS, retryArrivalsMs: [] };
  }

  /** The client retried the request at t. */
  noteRetry(request: TraceRequest, t: number): void {
    this.records[request.index].firstRefusal!.retryArrivalsMs.push(t);
  }

  /** The client gives up at `deadline` on what is still unfinished: each is aborted on its pod and booked as a timeout. */
  timeOutRemaining(deadline: number): void {
    this.advanceTo(deadline);
    for (const [id, o] of [...this.byId]) {
      this.pods[o.pod].engine.abort(id, deadline);
      this.dirty[o.pod] = true;
    }
    this.advanceTo(deadline);
  }

  private book(ev: EngineEvent): void {
    const o = this.byId.get(ev.id);
    if (!o) return;
    if (ev.type === "token") {
      if (ev.index === 0) {
        o.firstTokenMs = ev.time;
        for (const h of this.firstTokenHandlers) h(o.request, o.pod, ev.time);
      }
      o.tokensOut++;
    } else if (ev.type === "finished") {
      const record = this.records[o.request.index];
      const s = ev.stats;
      // Only timeouts abort in the simulator: times are censored at the abort, TTFT only if no token came (ttftOf).
      if (ev.reason === "abort") record.error = { kind: "timeout", message: "still running at the drain deadline" };
      record.firstTokenMs = s.tokenTimes.length > 0 ? s.tokenTimes[0] : undefined;
      record.endMs = ev.time;
      record.promptTokens = s.promptTokens;
      record.cachedTokens = s.cachedTokens;
      record.outputTokens = s.outputTokens;
      this.byId.delete(ev.id);
      this.outstandingByPod[o.pod].delete(ev.id);
      this.inFlightCount[o.pod]--;
      for (const h of this.finishedHandlers) h(o.request, o.pod, ev.time);
    }
  }
}
