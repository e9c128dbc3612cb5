// A stream's response path and its end: GatewayStream, the class each of
// Envoy's streams on the filter is, its request path inherited
// (request-path.ts). An answer that will carry token counts (any
// answer that is not a stream, and streams that asked for
// stream_options.include_usage) costs one read per chunk of at most its last
// 2 KiB, kept in a bounded tail (core/openai/usage.ts); nothing is buffered.
// With an access log configured, its usage also goes into the stream's
// filter state at the answer's end (one call), for the log's tokens field.
import { DataAction } from "../abi/context";
import { BufferType, getBufferBytes, getPropertyBytes, nowNanos, propertyPath, setProperty, utf8 } from "../abi/hostcalls";
import { NO_RESPONSE } from "../core/lifecycle";
import { ApiKind } from "../core/openai/request";
import { StreamEnd, UsageTail } from "../core/openai/usage";
import { RequestPath } from "./request-path";

// Envoy's access log reads it as %FILTER_STATE(wasm.llm_gateway_usage:PLAIN)% (host/envoy/telemetry.ts).
const USAGE_STATE = utf8("llm_gateway_usage");
const RESPONSE_CODE = propertyPath("response.code");
const UPSTREAM_ADDRESS = propertyPath("upstream.address");
const RESPONSE_FLAGS = propertyPath("response.flags");

export class GatewayStream extends RequestPath {
  /**
   * Keeps the last bytes of an answer that will carry token counts, or of a
   * stream (whether it ends with its terminal event); the chunk itself passes
   * on untouched.
   */
  onResponseBody(bodySize: i32, endOfStream: bool): DataAction {
    if (this.prefillTokens > 0 && bodySize > 0) this.prefilled();
    if (this.completeNs > 0 && this.stream && bodySize > 0) this.firstBytes();
    if ((this.readsUsage || this.stream) && bodySize > 0) {
      // A stream's tail is kept whole even without usage: its last event may be an error.
      const wanted = UsageTail.wanted(bodySize);
      const bytes = this.worker.scratch;
      if (getBufferBytes(BufferType.ResponseBody, bodySize - wanted, wanted, bytes)) {
        if (this.tail == null) this.tail = this.worker.takeTail();
        this.tail!.push(bytes.ptr, bytes.len);
      }
      bytes.release();
    }
    // Before the stream completes, so Envoy's access log sees the filter state.
    if (endOfStream) {
      this.answerEnded = true;
      this.countTokens();
    }
    return DataAction.Continue;
  }

  onDone(): void {
    // A request whose client left before it was sent still holds its headers.
    this.releasePairs();
    if (this.queued) {
      // The client left while held: its place goes at once.
      this.queued = false;
      const worker = this.worker;
      if (worker.router.cancel(this.id)) {
        worker.stats!.abandon(this.heldPriority);
        worker.queueChanged();
      }
      return;
    }
    this.countTokens();
    const worker = this.worker;
    const tail = this.tail;
    // An error event before [DONE] ends a 200 stream that failed: a broken answer, the pod's failure.
    const ending = this.stream && tail != null ? tail!.streamEnd(this.kind == ApiKind.Responses) : StreamEnd.Broken;
    if (ending == StreamEnd.Failed && this.pool != null && this.served != null) worker.stats!.streamError(this.pool!, this.served!);
    const sawDone = ending == StreamEnd.Whole;
    if (tail != null) {
      this.tail = null;
      worker.giveBackTail(tail);
    }
    const primary = this.primary;
    if (primary == null) return;
    const bytes = worker.scratch;
    let status: i64 = NO_RESPONSE;
    let flags: u64 = 0;
    if (getPropertyBytes(RESPONSE_CODE, bytes) && bytes.len == 8) {
      status = load<i64>(bytes.ptr);
      // Envoy's flags tell of an answer cut short (core/fleet/outcome.ts); one that ended whole and well has none to tell.
      const whole = this.answerEnded && status >= 200 && status < 300 && (!this.stream || sawDone);
      if (!whole && getPropertyBytes(RESPONSE_FLAGS, bytes) && bytes.len == 8) flags = load<u64>(bytes.ptr);
      // No upstream: Envoy answered itself (e.g. a model route's rate limit), no pod did.
      if (!getPropertyBytes(UPSTREAM_ADDRESS, bytes)) bytes.release();
    } else {
      bytes.release();
    }
    worker.endRequest(primary, this.load, bytes, status, flags, this.stream, sawDone, this.prefillTokens);
    bytes.release();
  }

  /** A stream's first answer bytes: its time to first token, counted from its decision (holding included). */
  private firstBytes(): void {
    const nowNs = nowNanos();
    const startNs = this.completeNs;
    this.completeNs = 0;
    if (this.pool != null && this.served != null) this.worker.stats!.firstToken(this.pool!, this.served!, nowNs > startNs ? (nowNs - startNs) / 1000 : 0);
  }

  /** The stream's first bytes: the pod has prefilled its prompt, which no longer counts as work ahead there. */
  private prefilled(): void {
    const tokens = this.prefillTokens;
    this.prefillTokens = 0;
    this.worker.inflight.add(this.primary!.addressHash, 0, -1, -tokens);
  }

  /**
   * The answer's usage, if it had one, into the pool's and model's token
   * counters and, when the access log wants it, the stream's filter state
   * (one host call); once, at the answer's end or when the stream is done.
   */
  private countTokens(): void {
    const tail = this.tail;
    if (tail == null || !this.readsUsage || this.tokensCounted) return;
    this.tokensCounted = true;
    const usage = this.worker.usage;
    if (!tail.find(usage)) return;
    this.worker.stats!.tokens(this.pool!, this.served!, usage);
    if (this.worker.config.usageToFilterState) {
      setProperty(USAGE_STATE, utf8(`{"prompt_tokens":${usage.promptTokens},"completion_tokens":${usage.completionTokens}}`));
    }
  }
}
