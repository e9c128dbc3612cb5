// What one request's stream knows, from its headers to its end. Its request
// path (request-path.ts) fills it in and its response path (response-path.ts)
// reads it; they build on this class in that order, so the stream stays one
// object with direct calls, as cheap per chunk as a single class.
import { HttpContext } from "../abi/context";
import { freeHostBuffer } from "../abi/host-buffers";
import { PoolLoad } from "../core/fleet/pool-load";
import { NO_PRIORITY } from "../core/fleet/priority";
import { ApiKind } from "../core/openai/request";
import { Endpoint, ModelRoute, Pool } from "../core/fleet/snapshot";
import { UsageTail } from "../core/openai/usage";
import { GatewayWorker } from "./worker";

export abstract class StreamState extends HttpContext {
  /** The body an inference path carries (core/openai/routes.ts). */
  protected kind: ApiKind = ApiKind.Other;
  /** Waiting for the end of the body (its last data frame or trailers). */
  protected holding: bool = false;
  /** The filter answered this request itself. */
  protected answered: bool = false;
  /** The pod chosen first, kept to learn how the request went. */
  protected primary: Endpoint | null = null;
  /** Where the request's completion counts towards its pool's drain rate. */
  protected load: PoolLoad | null = null;
  /** From the request headers: the class asked for, and what the client may claim. */
  protected priority: i32 = NO_PRIORITY;
  protected mayClaimCritical: bool = false;
  protected explain: bool = false;
  protected contentLength: i64 = -1;
  /** Where the request was sent and as which model: its answer's tokens count there. */
  protected pool: Pool | null = null;
  protected served: ModelRoute | null = null;
  /** The end of the answer so far, kept when the answer will carry token counts or is a stream. */
  protected tail: UsageTail | null = null;
  protected tokensCounted: bool = false;
  /** The answer's body reached its end here, in order (no reset, no deadline cut it). */
  protected answerEnded: bool = false;
  protected readsUsage: bool = false;
  /** The request asked for a stream: its answer must end with the terminal event. */
  protected stream: bool = false;
  /** When it was decided (ns: a timed decision's start, else its end), for a stream sent or held, until its first answer bytes. */
  protected completeNs: u64 = 0;
  /** Paused in a hold queue until the tick dispatches or refuses it. */
  protected queued: bool = false;
  protected heldPriority: i32 = 0;
  protected tenant: u64 = 0;
  protected maxWaitMs: i64 = -1;
  /** The per-try deadline computed when the body was read, set when the request is sent. */
  protected deadlineMs: u32 = 0;
  /** Prompt tokens the shared table counts as this stream's prefill on `primary`, until its first answer bytes. */
  protected prefillTokens: i32 = 0;
  /**
   * The request's headers as they came (host bytes, pairs.ts), kept until its
   * routing headers are set from them (request-headers.ts); 0 when none.
   */
  protected pairsPtr: usize = 0;
  protected pairsLen: i32 = 0;
  /** The routing headers' values, fixed when the body was read: the pool, the model asked for, its base model. */
  protected poolName: ArrayBuffer | null = null;
  protected modelName: ArrayBuffer | null = null;
  protected baseModel: ArrayBuffer | null = null;
  /** The body's length after its model was rewritten (a canary split), else -1. */
  protected rewrittenLength: i32 = -1;

  constructor(id: u32, protected worker: GatewayWorker) {
    super(id);
  }

  /** Lets the request's kept header pairs go (sent on, answered here, or its client left first). */
  protected releasePairs(): void {
    if (this.pairsPtr != 0) freeHostBuffer(this.pairsPtr);
    this.pairsPtr = 0;
    this.pairsLen = 0;
  }
}
