// The HTTP filter. For an inference POST it holds the request until the body
// is complete (end of data, or trailers), routes it with the shared Router and
// tells Envoy where to send it: `x-gateway-pool` selects the pool's route and
// cluster, `x-gateway-destination-endpoint` lists the chosen pod and its
// fallbacks for the cluster's override_host policy, which only ever connects
// to the pool's known hosts. GET /v1/models, /v1/models/{id} and /health are
// answered here; every other request is left to Envoy's route table (404/405).
// Client-sent x-gateway-* headers are removed first (the JWT claims that
// Envoy's jwt_authn put in x-gateway-claim-* are read, then removed too).
// It also sets x-gateway-model-name (the model asked for) and
// x-gateway-base-model, so Envoy's routes can match a model; Envoy
// re-evaluates the route after the filter has set them. A request for a model
// with a canary split is sent as its chosen target, the body's "model"
// rewritten. A class (x-llm-priority) decides admission: a request its pool
// has no room for is held (the stream paused, its body in Envoy's buffer)
// until the tick releases it to the pod that has room then, or answers 429
// with Retry-After once it cannot be served within its wait budget.
//
// Per routed request the hot path makes these host calls: read the header
// pairs, read the body, read and write the shared in-flight table, set the
// routing headers (one call, request-headers.ts), and at the end read the
// response code, the response flags (unless the answer ended whole and well)
// and the upstream address to learn how the request went (passive health).
// The request's release from the in-flight table waits for this worker's next
// write of it (shared-inflight.ts). Counters are kept in Wasm memory and
// handed to Envoy on the tick (traffic-stats.ts); one decision in 16 is timed
// for the decision-time histogram (two clock reads), and a stream reads the
// clock where its time to first token starts and, at its first bytes, reads
// it again and reads and writes the in-flight table (its prefill done).
//
// The filter's parts: this file's root context (one per worker: configure,
// tick, a stream per request), the worker's state both share (worker.ts),
// and the stream: what it knows (stream-state.ts), its request path
// (request-path.ts) and its response path and end (response-path.ts).
import { HttpContext, RootContext, streamOf } from "../abi/context";
import { BufferType, getBufferBytes, log, LogLevel, setEffectiveContext, setTickPeriod } from "../abi/hostcalls";
import { HoldSink } from "../core/scheduling/held-dispatch";
import { HeldRequest } from "../core/queueing/held-request";
import { FilterConfig } from "./config";
import { reportMemoryGrowth } from "./memory-gauge";
import { GatewayWorker } from "./worker";
import { GatewayStream } from "./response-path";

export class GatewayRoot extends RootContext {
  readonly worker: GatewayWorker = new GatewayWorker();
  private release: StreamRelease = new StreamRelease(this.worker);

  onConfigure(size: i32): bool {
    const worker = this.worker;
    if (getBufferBytes(BufferType.PluginConfig, 0, size, worker.scratch)) {
      worker.config = FilterConfig.parse(worker.scratch.ptr, worker.scratch.len);
      worker.scratch.release();
    }
    if (worker.config.error.length > 0) {
      // Refusing the configuration makes Envoy reject the filter: no traffic passes a misconfigured gateway.
      log(LogLevel.Critical, "llm_gateway config: " + worker.config.error);
      return false;
    }
    worker.applyConfig();
    setTickPeriod(worker.config.refreshMs);
    worker.refresh();
    return true;
  }

  onTick(): void {
    const worker = this.worker;
    // Before anything reads the table: the requests that ended here since this worker last wrote it.
    worker.inflight.flush();
    worker.refresh();
    this.releaseHeld();
    worker.metrics!.tick(worker.view.current, worker.nowMs, worker.view.heardMs);
    worker.stats!.flush();
    reportMemoryGrowth();
  }

  createHttpContext(id: u32): HttpContext | null {
    return new GatewayStream(id, this.worker);
  }

  /**
   * The tick's part in holding, while this worker holds requests or the
   * board last showed others holding (an idle tick costs nothing): learns
   * what the other workers hold, dispatches or refuses this worker's held
   * requests as room frees, and renews its summary on the board. A worker
   * that holds nothing routes on the shared in-flight table like the others,
   * so it sees the same room; it learns of others' queues when it first
   * holds a request itself.
   */
  private releaseHeld(): void {
    const worker = this.worker;
    const router = worker.router;
    if (router.holds.count == 0 && !router.board.busy) return;
    worker.queues.read(router);
    if (router.holds.count == 0 && !router.board.busy) return;
    if (router.holds.count > 0) {
      worker.inflight.read();
      router.pump(worker.view, worker.inflight.table, worker.refusals, this.release, worker.nowMs);
      // Later host calls act on the root again.
      setEffectiveContext(this.id);
    }
    worker.queues.commit(router, worker.nowMs);
    worker.metrics!.held(router.writer, router.holds.count, router.holds.bytes);
  }
}

/** Resumes or answers the held streams the router's pump releases or refuses. */
class StreamRelease extends HoldSink {
  constructor(private worker: GatewayWorker) {
    super();
  }

  dispatched(h: HeldRequest): void {
    const stream = this.stream(h.id);
    if (stream != null) stream.resume(this.worker.router);
  }

  refused(h: HeldRequest): void {
    const stream = this.stream(h.id);
    if (stream != null) stream.refuseHeld(this.worker.router);
  }

  /** The held stream, now the effective context for the host calls that follow; null if it is gone. */
  private stream(id: u32): GatewayStream | null {
    const s = streamOf(id);
    if (s == null || !(s instanceof GatewayStream) || !setEffectiveContext(id)) return null;
    return changetype<GatewayStream>(s);
  }
}
