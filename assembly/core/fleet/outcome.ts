// How a routed request ended, judged for the passive-health ledger
// (core/fleet/health.ts): which pod failed it, or whether the pod chosen first
// served it well. Pure, so the filter and the native build blame alike.
//
// A pod failed a request when
//   - Envoy moved the request off it to a fallback (it refused the
//     connection, reset, answered 500, 502 or 504, or its per-try deadline fired), or
//   - it served the request and answered another 5xx than 503, or Envoy ended the answer for
//     an upstream reason (a deadline, a reset or a broken connection after
//     the headers; response flags UT, UR, UF, UC, URX, UPE), or
//   - it served a stream that ended without its terminal `data: [DONE]`
//     event while the client was still there.
// A client that went away (DC) teaches nothing about the pod that served it.
// A pod that itself answered 429 or 503 is saturated, not failed: it is full
// (TGI's "Model is overloaded", a server's own admission limit), so it is
// backed off for a moment, neither ejected nor taken as a success.

/** Envoy's response flags (StreamInfo, the `response.flags` property) that put the fault upstream. */
export const FLAG_UPSTREAM_TIMEOUT: u64 = 0x4;
const FLAG_UPSTREAM_REMOTE_RESET: u64 = 0x10;
const FLAG_UPSTREAM_CONNECTION_FAILURE: u64 = 0x20;
const FLAG_UPSTREAM_CONNECTION_TERMINATION: u64 = 0x40;
const FLAG_DOWNSTREAM_CONNECTION_TERMINATION: u64 = 0x4000;
const FLAG_UPSTREAM_RETRY_LIMIT: u64 = 0x8000;
const FLAG_UPSTREAM_PROTOCOL_ERROR: u64 = 0x800000;
const UPSTREAM_FAULTS: u64 = FLAG_UPSTREAM_TIMEOUT | FLAG_UPSTREAM_REMOTE_RESET | FLAG_UPSTREAM_CONNECTION_FAILURE |
  FLAG_UPSTREAM_CONNECTION_TERMINATION | FLAG_UPSTREAM_RETRY_LIMIT | FLAG_UPSTREAM_PROTOCOL_ERROR;

export class Outcome {
  /** The pod chosen first failed the request. */
  primaryFailed: bool = false;
  /** ...so that Envoy moved it to another pod: that ejects at once (core/fleet/health.ts). */
  primaryMovedOff: bool = false;
  /** Another pod (a fallback, `served`) failed it too. */
  servedFailed: bool = false;
  /** The pod chosen first served it well. */
  primarySucceeded: bool = false;
  /** The pod that answered (a fallback when moved) said it is full: 429 or 503 of its own. */
  saturated: bool = false;

  /**
   * `moved`: Envoy's last try went to another pod than the one chosen first;
   * `status`: the response code; `flags`: Envoy's response flags; `stream`:
   * the answer was a 200 event stream, `sawDone` its end was the terminal event.
   */
  judge(moved: bool, status: i64, flags: u64, stream: bool, sawDone: bool): void {
    const clientGone = (flags & FLAG_DOWNSTREAM_CONNECTION_TERMINATION) != 0;
    const upstreamFault = (flags & UPSTREAM_FAULTS) != 0;
    const saturated = (status == 429 || status == 503) && !upstreamFault;
    const servedFailed = !saturated && (status >= 500 || upstreamFault || (stream && status == 200 && !sawDone && !clientGone));
    this.primaryFailed = moved || servedFailed;
    this.primaryMovedOff = moved;
    this.servedFailed = moved && servedFailed;
    this.primarySucceeded = !moved && !servedFailed && !saturated && !clientGone;
    this.saturated = saturated;
  }
}
