// Loads build/native.wasm, the same routing core the Envoy filter runs, for
// tests, the simulator and tools.
import { readFile } from "node:fs/promises";
import { pathToFileURL } from "node:url";
import { CONTRACT } from "../../host/contract.js";
import { nativeBindingsPath, nativeWasmPath } from "../../host/paths.js";
import { encodeSnapshot, SnapshotMsg } from "../../host/proto.js";

export type ApiKind = "chat" | "completions" | "responses" | "other";
const KIND_CODE: Record<ApiKind, number> = { chat: 0, completions: 1, responses: 2, other: 3 };

export interface OpenAIErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

export type PriorityClass = "critical" | "standard" | "sheddable";
const PRIORITY_CODE: Record<PriorityClass, number> = CONTRACT.priorities;
/** What the filter passes for a missing x-llm-priority header, and for one that names no class. */
const NO_PRIORITY = -1;
const BAD_PRIORITY = -2;

/** What the filter reads from a request's headers besides its body. */
export interface RouteOptions {
  /** The x-llm-priority header's value (any case); absent: the model's default class. */
  priority?: string;
  /** The client may claim Critical (the config's critical gate let it through). */
  mayClaimCritical?: boolean;
  /** Explain the decision, as the x-gateway-decision header does. */
  explain?: boolean;
  /** A handle (> 0) under which the request may be held when its pool has no room; without one it is refused instead. */
  holdId?: number;
  /** The request's tenant (fair shares of a hold queue); absent: the tenant-less share. */
  tenant?: string;
  /** The client's x-llm-max-wait-ms: a tighter wait budget than its class's. */
  maxWaitMs?: number;
}

/** Held: pump() dispatches it later (a PumpEvent with its id), or refuses it. */
export interface HeldResult {
  held: number;
  pool: string;
  model: string;
  target: string;
  class: PriorityClass;
  stream: boolean;
  deadlineMs: number;
}

/** What a refresh tick decided for one held request: sent to `endpoint`, or answered with `status`. */
export type PumpEvent =
  | { id: number; endpoint: string | null; fallbacks: string[]; prefillTokens: number; class: PriorityClass; explanation?: string }
  | { id: number; status: number; retryAfterS?: number; error: OpenAIErrorBody["error"]; explanation?: string };

export type RouteResult =
  | {
      /** null when there is no pod to name (the view too old and none last known good): Envoy picks in the pool. */
      endpoint: string | null;
      fallbacks: string[];
      /** A stream's prompt tokens counted as prefill on `endpoint` until firstBytes() (0 for others). */
      prefillTokens: number;
      pool: string;
      /** The model the body asked for. */
      model: string;
      /** The model served: a canary split's target, else `model`. */
      target: string;
      class: PriorityClass;
      /** Asked for Critical without being allowed to. */
      downgraded: boolean;
      /** A retry of a refused request, admitted on the next class's limit. */
      retried: boolean;
      stream: boolean;
      /** A stream that asked for stream_options.include_usage (its answer will carry token counts). */
      includeUsage: boolean;
      prompt: [number, number];
      /** Routed on a view too old to score on: `endpoint` is then a pod last known good, or null. */
      blind: boolean;
      /** The per-try deadline to the first byte the filter hands Envoy, ms; 0 for none. */
      deadlineMs: number;
      explanation?: string;
    }
  | {
      status: number;
      error: OpenAIErrorBody["error"];
      /** With a 429 (pool saturated for the request's class): the Retry-After, seconds. */
      retryAfterS?: number;
      explanation?: string;
    };

/** How a routed request ended, as the filter sees it when its stream is done (core/lifecycle.ts). */
export interface RequestEndSpec {
  /** The pod the request was routed to first. */
  address: string;
  /** The response code; absent when the client left before any answer (nothing is learned then). */
  status?: number;
  /** The pod Envoy's last try went to; default `address` when there is a status, "" for an answer no pod gave. */
  upstream?: string;
  /** Envoy's response flags (StreamInfo). */
  flags?: bigint;
  /** The answer was an event stream, and whether it ended with its terminal event. */
  stream?: boolean;
  sawDone?: boolean;
  /** What the request still counted as prefill: its route's prefillTokens if firstBytes() never came, else 0. */
  prefillTokens?: number;
}

function priorityCode(header: string | undefined): number {
  if (header === undefined) return NO_PRIORITY;
  // ASCII case only, as the filter compares header bytes.
  const lower = header.replace(/[A-Z]/g, (c) => c.toLowerCase());
  return Object.hasOwn(PRIORITY_CODE, lower) ? PRIORITY_CODE[lower as PriorityClass] : BAD_PRIORITY;
}

interface Bindings {
  reset(seed: bigint): void;
  setSnapshot(bytes: Uint8Array): boolean;
  route(
    body: Uint8Array, kind: number, priority: number, mayClaimCritical: boolean, explain: boolean, holdId: number, tenant: string, maxWaitMs: bigint,
  ): string;
  pump(): string;
  setWriter(id: number): void;
  cancel(holdId: number): boolean;
  heldCount(): number;
  boardBusy(): boolean;
  setHoldLimits(maxBytes: bigint, maxRequests: number): void;
  setBoard(bytes: Uint8Array): boolean;
  boardBytes(): Uint8Array;
  setClock(nowMs: bigint, heardMs: bigint): void;
  setViewPolicy(maxAgeMs: bigint, stalePolicy: number): void;
  setFullScan(pods: number): void;
  setShortlistWalks(always: boolean): void;
  candidates(): string;
  setHealthRules(ejectAfter: number, ejectMs: bigint, saturatedBackoffMs: bigint): void;
  recordsPicks(): boolean;
  setInflight(bytes: Uint8Array): boolean;
  setRefusals(bytes: Uint8Array): boolean;
  refusalTable(): Uint8Array;
  inflightTable(): Uint8Array;
  inflightPublished(): boolean;
  flushInflight(): boolean;
  setPeers(bytes: Uint8Array): boolean;
  setReplicaPlace(index: number, count: number): void;
  linkReport(table: Uint8Array): Uint8Array;
  linkReceive(fanout: Uint8Array): Uint8Array;
  linkReset(): void;
  linkPrefixReport(log: Uint8Array): Uint8Array;
  linkPrefixApply(log: Uint8Array, records: Uint8Array): Uint8Array;
  linkQueueReport(board: Uint8Array): Uint8Array;
  linkQueueAdopt(board: Uint8Array, peers: Uint8Array): Uint8Array;
  endRequest(primary: string, upstream: string, status: number, flags: bigint, stream: boolean, sawDone: boolean, prefillTokens: number): number;
  firstBytes(address: string, prefillTokens: number): void;
  inflightOf(address: string): number;
  exchangePrefixLog(log: Uint8Array): Uint8Array;
  snapshotJson(): string;
}

export class NativeRouter {
  private constructor(private readonly wasm: Bindings) {}

  static async load(): Promise<NativeRouter> {
    const bindings = await import(pathToFileURL(nativeBindingsPath).href);
    const module = await WebAssembly.compile(await readFile(nativeWasmPath));
    return new NativeRouter(await bindings.instantiate(module, {}));
  }

  reset(seed: number): void {
    this.wasm.reset(BigInt(seed));
  }

  /** The filter's clock: now, and when the aggregator was last heard from (0 = never). */
  setClock(nowMs: number, heardMs: number): void {
    this.wasm.setClock(BigInt(nowMs), BigInt(heardMs));
  }

  setViewPolicy(maxAgeMs: number, stalePolicy: "fail-open" | "reject"): void {
    this.wasm.setViewPolicy(BigInt(maxAgeMs), stalePolicy === "reject" ? 1 : 0);
  }

  /**
   * Pools with up to `pods` usable endpoints are scored whole, larger ones
   * over their shortlist (the default bound is FULL_SCAN in
   * assembly/core/scheduling/shortlist.ts); kept across reset().
   */
  setFullScan(pods: number): void {
    this.wasm.setFullScan(pods);
  }

  /** Every pick walks its shortlist's trees anew, keeping no list between picks (to test that list). */
  setShortlistWalks(always: boolean): void {
    this.wasm.setShortlistWalks(always);
  }

  /** The addresses the last pick scored (the pool's usable pods, or its shortlist), in slot order. */
  candidates(): string[] {
    const text = this.wasm.candidates();
    return text === "" ? [] : text.split(",");
  }

  /** Some model of the installed snapshot weighs a scorer that records its picks (the filter then shares the prefix log). */
  recordsPicks(): boolean {
    return this.wasm.recordsPicks();
  }

  /** The passive-health ledger's rules (gateway.passiveHealth): failures before ejection, and for how long. */
  /** `saturatedBackoffMs`: how long a pod that answered 429/503 itself is passed over (default the filter's, 1 s). */
  setHealthRules(rules: { ejectAfter: number; ejectMs: number; saturatedBackoffMs?: number }): void {
    this.wasm.setHealthRules(rules.ejectAfter, BigInt(rules.ejectMs), BigInt(rules.saturatedBackoffMs ?? 1_000));
  }

  /**
   * Loads the in-flight table shared by all workers (the filter's shared-data
   * key), with this instance's changes not yet published; route() adds to
   * it, and inflightTable() returns it for the other instances once
   * inflightPublished() says the filter would have written it. A request's
   * end changes it at once here, and reaches the others with this instance's
   * next write (a routed request, a stream's first bytes) or its flushInflight().
   */
  setInflight(bytes: Uint8Array): void {
    if (!this.wasm.setInflight(bytes)) throw new Error("native router rejected the in-flight table bytes");
  }

  inflightTable(): Uint8Array {
    return this.wasm.inflightTable();
  }

  /** Since setInflight(), the filter would have written the table (a request counted on a pod, a stream's first bytes), releases that waited included. */
  inflightPublished(): boolean {
    return this.wasm.inflightPublished();
  }

  /** The tick's flush (GatewayRoot.onTick) of the unpublished changes into the table loaded last; false when there were none. */
  flushInflight(): boolean {
    return this.wasm.flushInflight();
  }

  /** Loads the other Envoy replicas' in flight (the filter's peers key, read on a worker's tick): get() and scoring add it to the own. */
  setPeers(bytes: Uint8Array): void {
    if (!this.wasm.setPeers(bytes)) throw new Error("native router rejected the peers' in-flight bytes");
  }

  /** This worker's Envoy's place among the replicas sharing (the snapshot cell's, read on a worker's tick): near-equal pods lean apart. */
  setReplicaPlace(index: number, count: number): void {
    this.wasm.setReplicaPlace(index, count);
  }

  /**
   * The link's report (gateway/link.ts; an instance used for these plays
   * Envoy's singleton service): the entries of the shared in-flight table
   * changed since the last report (core/fleet/peer-load.ts).
   */
  linkReport(table: Uint8Array): Uint8Array {
    return this.wasm.linkReport(table);
  }

  /** The link applies a fan-out from the aggregator: the peers' table it publishes to the workers. */
  linkReceive(fanout: Uint8Array): Uint8Array {
    return this.wasm.linkReceive(fanout);
  }

  /** A new stream: the next report is whole, the peers' table empty. */
  linkReset(): void {
    this.wasm.linkReset();
  }

  /** The link's prefix report (gateway/peer-prefix.ts): the records of `log` written since the last call, except the link's own (core/prefix/prefix-share.ts). */
  linkPrefixReport(log: Uint8Array): Uint8Array {
    return this.wasm.linkPrefixReport(log);
  }

  /** `log` with a fan-out's peer prefix records appended under the link's writer id; an empty array if they do not decode (the link then drops the stream). */
  linkPrefixApply(log: Uint8Array, records: Uint8Array): Uint8Array {
    return this.wasm.linkPrefixApply(log, records);
  }

  /** The link's queue report (Hello.queues) from the shared board's bytes; null when it has not changed since the last. */
  linkQueueReport(board: Uint8Array): Uint8Array | null {
    const report = this.wasm.linkQueueReport(board);
    return report.byteLength === 0 ? null : report;
  }

  /** The shared board with a fan-out's peer_queues adopted (the other Envoys' summaries replaced, stamped with this clock). */
  linkQueueAdopt(board: Uint8Array, peers: Uint8Array): Uint8Array {
    const merged = this.wasm.linkQueueAdopt(board, peers);
    if (merged.byteLength === 0) throw new Error("the link rejected a fan-out's queue summaries");
    return merged;
  }

  /** Loads the memory of refused requests all workers share (the filter's llm_gateway.refusals key). */
  setRefusals(bytes: Uint8Array): void {
    if (!this.wasm.setRefusals(bytes)) throw new Error("native router rejected the refusal memory bytes");
  }

  refusalTable(): Uint8Array {
    return this.wasm.refusalTable();
  }

  /**
   * A routed request ended, at the clock's now (core/lifecycle.ts): its count
   * in flight released, its pool's drain fed when a pod answered, the pod to
   * blame written to the health ledger. Returns the failures recorded.
   */
  endRequest(end: RequestEndSpec): number {
    const answered = end.status !== undefined;
    const upstream = end.upstream ?? (answered ? end.address : "");
    return this.wasm.endRequest(
      end.address, upstream, end.status ?? -1, end.flags ?? 0n, end.stream ?? false, end.sawDone ?? true, end.prefillTokens ?? 0,
    );
  }

  /** A stream routed to `address` sent its first bytes: its route's `prefillTokens` stop counting as prefill there. */
  firstBytes(address: string, prefillTokens: number): void {
    this.wasm.firstBytes(address, prefillTokens);
  }

  inflightOf(address: string): number {
    return this.wasm.inflightOf(address);
  }

  /** A refresh tick's prefix-log exchange: replays the others' decisions in `log`, returns it with this one's added. */
  exchangePrefixLog(log: Uint8Array): Uint8Array {
    return this.wasm.exchangePrefixLog(log);
  }

  /**
   * Installs a snapshot object or its serialized bytes as a worker's refresh
   * tick does; the in-flight counts loaded last are its baseline.
   */
  setSnapshot(snapshot: SnapshotMsg | Uint8Array): void {
    const bytes = snapshot instanceof Uint8Array ? snapshot : encodeSnapshot(snapshot);
    if (!this.wasm.setSnapshot(bytes)) throw new Error("native router rejected the snapshot bytes");
  }

  /** The installed snapshot as the router decoded it, keyed by the .proto's field names; null before any. */
  installedSnapshot(): unknown {
    return JSON.parse(this.wasm.snapshotJson());
  }

  route(body: string | Uint8Array, kind: ApiKind = "chat", options: RouteOptions = {}): RouteResult {
    const result = JSON.parse(this.routeText(body, kind, options)) as RouteResult | HeldResult;
    if ("held" in result) throw new Error("the request was held: call routeOrHold() where requests may be held");
    return result;
  }

  /** route() for a request that may be held (options.holdId set). */
  routeOrHold(body: string | Uint8Array, kind: ApiKind = "chat", options: RouteOptions = {}): RouteResult | HeldResult {
    return JSON.parse(this.routeText(body, kind, options)) as RouteResult | HeldResult;
  }

  /** A refresh tick's dispatch of held requests, at the clock's now. */
  pump(): PumpEvent[] {
    return JSON.parse(this.wasm.pump()) as PumpEvent[];
  }

  /** This instance's id among the workers on the queue board. */
  setWriter(id: number): void {
    this.wasm.setWriter(id);
  }

  /** A held request's client left; false if it was not held. */
  cancel(holdId: number): boolean {
    return this.wasm.cancel(holdId);
  }

  heldCount(): number {
    return this.wasm.heldCount();
  }

  /** The board as last loaded shows requests held somewhere. */
  boardBusy(): boolean {
    return this.wasm.boardBusy();
  }

  setHoldLimits(limits: { maxBytes: number; maxRequests: number }): void {
    this.wasm.setHoldLimits(BigInt(limits.maxBytes), limits.maxRequests);
  }

  /** Loads the board of what every worker holds (the filter's llm_gateway.queues key). */
  setBoard(bytes: Uint8Array): void {
    if (!this.wasm.setBoard(bytes)) throw new Error("native router rejected the queue board bytes");
  }

  /** The board with this instance's summaries renewed. */
  boardBytes(): Uint8Array {
    return this.wasm.boardBytes();
  }

  /** The JSON text route() parses, exactly as the module wrote it (for checks on the text itself). */
  routeText(body: string | Uint8Array, kind: ApiKind = "chat", options: RouteOptions = {}): string {
    const bytes = typeof body === "string" ? Buffer.from(body) : body;
    return this.wasm.route(
      bytes, KIND_CODE[kind], priorityCode(options.priority), options.mayClaimCritical ?? false, options.explain ?? false,
      options.holdId ?? 0, options.tenant ?? "", BigInt(options.maxWaitMs ?? -1),
    );
  }
}
