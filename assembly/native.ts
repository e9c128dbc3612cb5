// Entry point of the standalone build (build/native.wasm + asc's raw JS
// bindings) that Node tests, the simulator and tools load. It exposes the very
// Router and FleetView the Envoy filter runs, with no proxy-wasm host
// underneath: what the filter keeps in shared data (the in-flight table, the
// prefix log) is handed in and out as bytes, so a caller running several
// instances (one per simulated Envoy worker) shares them as Envoy would.
import { ApiKind } from "./core/openai/request";
import { HoldSink, RequestMeta, Router, Verdict } from "./core/scheduling/router";
import { HeldRequest } from "./core/queueing/held-request";
import { Priority, priorityName } from "./core/fleet/priority";
import { Deadlines, Endpoint, ModelRoute, Pool, Profile, Weights } from "./core/fleet/snapshot";
import { decodeSnapshot } from "./core/wire/snapshot-decode";
import { Admission } from "./core/fleet/admission-limits";
import { jsonString } from "./core/openai/errors";
import { StaleViewPolicy } from "./core/fleet/view";
import { HealthLedger, HealthRules } from "./core/fleet/health";
import { FleetView } from "./core/scheduling/fleet-view";
import { walkEveryTake } from "./core/scheduling/score-tree";
import { FULL_SCAN } from "./core/scheduling/shortlist";
import { InflightTable } from "./core/fleet/inflight";
import { PeerLoad, ReportEncoder } from "./core/fleet/peer-load";
import { QueueShare } from "./core/queueing/peer-queues";
import { FOREIGN_WRITER, isForeignWriter } from "./core/queueing/queue-board";
import { ProtoWriter } from "./core/wire/proto";
import { PrefixDecision } from "./core/prefix/prefix-index";
import { appendRecords, LOG_BYTES, PrefixLogReader } from "./core/prefix/prefix-log";
import { LINK_WRITER, PrefixRecordBatch, PrefixShareReporter } from "./core/prefix/prefix-share";
import { hashBuffer, mix64 } from "./core/wire/hash";
import { PoolLoad } from "./core/fleet/pool-load";
import { LocalRefusals } from "./core/fleet/refusals";
import { findUsage, Usage, UsageTail } from "./core/openai/usage";
import { Ledgers, NO_RESPONSE, RequestEnd } from "./core/lifecycle";

let router = new Router(1);
let view = new FleetView();
let inflight = new InflightTable();
let unpublished = new UnpublishedChanges();
let refusals = new LocalRefusals();
let health = new HealthLedger();
let healthRules = new HealthRules();
let logReader = new PrefixLogReader();
let writer: u32 = 1;
let version: u64 = 0;
const scratch = new PrefixDecision();
/** Per pod, the pool (drain bookkeeping) its latest routed request was counted in. */
let routedIn = new Map<u64, PoolLoad>();
// The filter passes Envoy's clock; the native build is told the time. By
// default the view was heard from just now, so routing is never blind.
let nowMs: u64 = 1;
view.heardMs = 1;

/** Starts over: a new tie-break sequence for `seed`, no snapshot, counts, health or prefix history, the default health rules. */
export function reset(seed: u64): void {
  const policy = router.policy;
  router = new Router(seed);
  router.policy = policy;
  router.scoreWholeUpTo(scoreWholeUpTo);
  view = new FleetView();
  view.heardMs = nowMs;
  inflight = new InflightTable();
  unpublished = new UnpublishedChanges();
  refusals = new LocalRefusals();
  health = new HealthLedger();
  healthRules = new HealthRules();
  logReader = new PrefixLogReader();
  routedIn = new Map<u64, PoolLoad>();
  // Distinct seeds give distinct writer ids, so instances tell their records apart.
  writer = <u32>mix64(seed) | 1;
  // Other Envoys' summaries have writers of their own pattern on the queue board.
  if (isForeignWriter(writer)) writer &= ~FOREIGN_WRITER;
  router.writer = writer;
}

let scoreWholeUpTo: i32 = FULL_SCAN;

/** Pools with up to `pods` usable endpoints are scored whole, larger ones over their shortlist (kept across reset). */
export function setFullScan(pods: i32): void {
  scoreWholeUpTo = pods;
  router.scoreWholeUpTo(pods);
}

/** For tests of the shortlist: every pick walks its trees anew, keeping no list between picks (all instances). */
export function setShortlistWalks(always: bool): void {
  walkEveryTake(always);
}

/** The addresses the last pick scored, in slot order, comma-separated. */
export function candidates(): string {
  const c = router.candidates;
  let out = "";
  for (let i = 0; i < c.length; i++) out += (i > 0 ? "," : "") + c[i].address;
  return out;
}

/** This instance's id on the queue board, as the filter's worker id (reset() derives one from the seed). */
export function setWriter(id: u32): void {
  writer = id;
  router.writer = id;
}

/** Sets the clock and when the aggregator was last heard from (0 = never). */
export function setClock(now: u64, heard: u64): void {
  nowMs = now;
  view.heardMs = heard;
}

/** Sets how old the view may get and what to do past that (0 fail open, 1 reject). */
export function setViewPolicy(maxAgeMs: u64, stalePolicy: i32): void {
  router.policy.maxAgeMs = maxAgeMs;
  router.policy.stalePolicy = <StaleViewPolicy>stalePolicy;
}

/** Some model of the installed snapshot weighs a scorer that records its picks: the filter then shares the prefix log. */
export function recordsPicks(): bool {
  return view.current != null && router.recordsPicks(view.current!);
}

/** The passive-health ledger's rules, as the filter's config sets them (gateway.passiveHealth). */
export function setHealthRules(ejectAfter: u32, ejectMs: u64, saturatedBackoffMs: u64): void {
  healthRules = new HealthRules();
  healthRules.threshold = ejectAfter;
  healthRules.ejectMs = ejectMs;
  healthRules.saturatedBackoffMs = saturatedBackoffMs;
}

/** This instance's tables, as a request's end changes them (core/lifecycle.ts). */
class NativeLedgers extends Ledgers {
  release(hash: u64, prefillTokens: i32): void {
    unpublished.add(hash, -1, prefillTokens > 0 ? -1 : 0, -prefillTokens);
  }

  recordFailure(address: string, nowMs: u64, eject: bool): void {
    health.recordFailure(address, nowMs, healthRules, eject);
  }

  recordSaturated(address: string, nowMs: u64): void {
    health.recordSaturated(address, nowMs, healthRules);
  }

  recordSuccess(address: string): void {
    health.recordSuccess(address);
  }

  hasFailures(address: string): bool {
    return health.hasFailures(address);
  }
}

const ledgers = new NativeLedgers();
const requestEnd = new RequestEnd();

/**
 * A request routed first to `primary` ended, as the filter ends one when its
 * stream is done: `upstream` is the pod Envoy's last try went to ("" when no
 * pod answered), `status` the response code (-1: none, the client left
 * first), `flags` Envoy's response flags, `stream`/`sawDone` an event stream
 * and whether it ended with its terminal event, `prefillTokens` what it
 * still counted as prefill (route()'s prefillTokens if no answer bytes came,
 * else 0). Returns the failures it recorded against pods.
 */
export function endRequest(primary: string, upstream: string, status: i32, flags: u64, stream: bool, sawDone: bool, prefillTokens: i32): i32 {
  const hash = hashBuffer(String.UTF8.encode(primary));
  const served = upstream.length > 0 && upstream != primary ? upstream : null;
  // The pool it was routed in, as the filter's stream remembers it (a later snapshot may have moved the pod).
  const load = routedIn.has(hash) ? routedIn.get(hash) : null;
  requestEnd.end(
    primary, hash, served, upstream.length > 0, status < 0 ? NO_RESPONSE : <i64>status, flags, stream, sawDone, prefillTokens, load, nowMs, ledgers,
  );
  if (requestEnd.healthChanged && view.current != null) health.applyTo(view.current!);
  return requestEnd.failures;
}

/**
 * Installs a serialized llmgateway.v1.Snapshot as a worker's refresh tick
 * does, taking the in-flight counts loaded last (setInflight) as the
 * baseline; false if it does not decode.
 */
export function setSnapshot(bytes: Uint8Array): bool {
  const decoded = decodeSnapshot(bytes.dataStart, bytes.byteLength);
  if (decoded == null) return false;
  view.offer(++version, view.heardMs);
  view.install(decoded, version, inflight, health, router.prefixes);
  return true;
}

/**
 * The installed snapshot as decoded, in JSON keyed by the .proto's field names
 * (protobufjs' camelCase), or "null": lets a test check that every field the
 * aggregator encodes reaches the router with its value.
 */
export function snapshotJson(): string {
  const s = view.current;
  if (s == null) return "null";
  return "{" + num("version", <f64>s.version) + "," + num("generatedUnixMs", <f64>s.generatedMs) +
    ',"models":[' + list<ModelRoute>(s.models, modelJson) + '],"pools":[' + list<Pool>(s.pools, poolJson) +
    '],"profiles":[' + list<Profile>(s.profiles, profileJson) + "]}";
}

function num(key: string, v: f64): string {
  return jsonString(key) + ":" + (<f64><i64>v == v ? (<i64>v).toString() : v.toString());
}

function str(key: string, v: string): string {
  return jsonString(key) + ":" + jsonString(v);
}

function flag(key: string, v: bool): string {
  return jsonString(key) + ":" + (v ? "true" : "false");
}

function list<T>(items: T[], json: (item: T) => string): string {
  let out = "";
  for (let i = 0; i < items.length; i++) out += (i > 0 ? "," : "") + json(items[i]);
  return out;
}

function modelJson(m: ModelRoute): string {
  let splits = "";
  for (let i = 0; i < m.splits.length; i++) {
    splits += (i > 0 ? ",{" : "{") + num("model", <f64>m.splits[i].model) + "," + num("weight", <f64>m.splits[i].weight) + "}";
  }
  return "{" + str("name", m.name) + "," + num("pool", <f64>m.pool) + "," + str("adapter", m.adapter) + "," +
    num("profile", <f64>m.profileIndex) + "," + num("priority", <f64>m.priority) + ',"splits":[' + splits + "]}";
}

function weightsJson(w: Weights): string {
  let out = "{";
  for (let i = 0; i < w.names.length; i++) out += (i > 0 ? "," : "") + num(w.names[i], w.values[i]);
  return out + "}";
}

function admissionJson(a: Admission): string {
  return "{" + flag("enabled", a.enabled) + "," + num("maxWaiting", a.maxWaiting) + "," + num("maxKvCache", a.maxKvCache) + "," +
    num("sheddableFactor", a.sheddableFactor) + "," + num("criticalFactor", a.criticalFactor) + "," +
    num("maxRetryAfterS", <f64>a.maxRetryAfterS) + "," + num("waitCriticalMs", <f64>a.waitBudgetMs[Priority.Critical]) + "," +
    num("waitStandardMs", <f64>a.waitBudgetMs[Priority.Standard]) + "," + num("waitSheddableMs", <f64>a.waitBudgetMs[Priority.Sheddable]) + "}";
}

function deadlinesJson(d: Deadlines): string {
  return "{" + num("firstByteMs", <f64>d.firstByteMs) + "," + num("promptMsPerKtoken", <f64>d.promptMsPerKToken) + "," +
    num("outputMsPerToken", <f64>d.outputMsPerToken) + "," + num("assumedOutputTokens", <f64>d.assumedOutputTokens) + "}";
}

function profileJson(p: Profile): string {
  return "{" + str("name", p.name) + ',"weights":' + weightsJson(p.weights) + ',"admission":' + admissionJson(p.admission) +
    ',"deadlines":' + deadlinesJson(p.deadlines) + "}";
}

function stringsJson(items: string[]): string {
  return list<string>(items, (s: string): string => jsonString(s));
}

function endpointJson(e: Endpoint): string {
  return "{" + str("address", e.address) + "," + num("waiting", <f64>e.waiting) + "," + num("running", <f64>e.running) + "," +
    num("kvCacheUsage", e.kvCacheUsage) + "," + flag("fresh", e.fresh) + "," + num("maxLora", <f64>e.maxLora) + "," +
    '"runningAdapters":[' + stringsJson(e.runningAdapters) + '],"waitingAdapters":[' + stringsJson(e.waitingAdapters) + "]," +
    num("capacity", e.capacity) + "," + num("kvTokens", <f64>e.kvTokens) + "," + num("batchSlots", <f64>e.batchSlots) + "}";
}

function poolJson(p: Pool): string {
  return "{" + str("name", p.name) + "," + str("baseModel", p.baseModel) + ',"weights":' + weightsJson(p.weights) +
    ',"endpoints":[' + list<Endpoint>(p.endpoints, endpointJson) + "]}";
}

/**
 * This instance's in-flight releases (a request's end), as the filter keeps
 * them (gateway/shared-inflight.ts): applied to its own table at once and
 * whenever it loads the shared one, and published with its next write (a
 * routed request, a stream's first bytes) or its tick's flush.
 */
class UnpublishedChanges {
  private hashes: u64[] = [];
  private changes: i32[] = [];
  /** Since setInflight(), the table was written (inflightTable() is then what the others must see). */
  published: bool = false;

  add(hash: u64, delta: i32, streams: i32, tokens: i32): void {
    inflight.add(hash, delta, streams, tokens);
    this.hashes.push(hash);
    this.changes.push(delta);
    this.changes.push(streams);
    this.changes.push(tokens);
  }

  applyTo(table: InflightTable): void {
    for (let i = 0; i < this.hashes.length; i++) {
      table.add(this.hashes[i], this.changes[i * 3], this.changes[i * 3 + 1], this.changes[i * 3 + 2]);
    }
  }

  get count(): i32 {
    return this.hashes.length;
  }

  publish(): void {
    this.hashes.length = 0;
    this.changes.length = 0;
    this.published = true;
  }
}

/**
 * Loads the shared in-flight table (as the filter reads its shared-data key),
 * with this instance's unpublished changes; false if the bytes are not one.
 */
export function setInflight(bytes: Uint8Array): bool {
  const ok = inflight.decode(bytes.dataStart, bytes.byteLength);
  unpublished.applyTo(inflight);
  unpublished.published = false;
  return ok;
}

/** Since setInflight(), this instance wrote the table (a request routed to a pod, a stream's first bytes, a flush): share inflightTable(). */
export function inflightPublished(): bool {
  return unpublished.published;
}

/** The tick's flush: the unpublished changes go out with the table loaded last; false if there were none. */
export function flushInflight(): bool {
  if (unpublished.count == 0) return false;
  unpublished.publish();
  return true;
}

/** The in-flight table after this instance's changes, to share with the others. */
export function inflightTable(): Uint8Array {
  const out = new Uint8Array(inflight.encodedLength());
  inflight.encodeInto(out.dataStart);
  return out;
}

/** Loads the other replicas' in flight (the filter's llm_gateway.peers_inflight key, read on the tick); false if the bytes are not a table. */
export function setPeers(bytes: Uint8Array): bool {
  return inflight.decodePeers(bytes.dataStart, bytes.byteLength);
}

/** This instance's place among the replicas sharing (the snapshot cell's, read on the tick); count 0 or 1: alone. */
export function setReplicaPlace(index: u32, count: u32): void {
  router.place.set(index, count);
}

// The link's side (gateway/link.ts, Envoy's singleton service): an instance
// used for it plays that VM, whatever its router does.
let linkReports = new ReportEncoder();
let linkPeers = new PeerLoad();
const linkOwn = new InflightTable();

/** A report on the stream: the entries of the shared table (this gateway's own) changed since the last one. */
export function linkReport(table: Uint8Array): Uint8Array {
  if (!linkOwn.decode(table.dataStart, table.byteLength)) linkOwn.clear();
  const out = new ProtoWriter();
  linkReports.encode(linkOwn, out);
  return Uint8Array.wrap(out.finish());
}

/** A fan-out received: the peers' table to publish to the workers, or an empty array if it did not decode (the link then drops the stream). */
export function linkReceive(fanout: Uint8Array): Uint8Array {
  if (!linkPeers.apply(fanout.dataStart, fanout.byteLength)) return new Uint8Array(0);
  const sum = linkPeers.sum;
  const out = new Uint8Array(sum.encodedLength());
  sum.encodeInto(out.dataStart);
  return out;
}

/** A new stream: the next report is whole, no peers known. */
export function linkReset(): void {
  linkReports = new ReportEncoder();
  linkPeers = new PeerLoad();
  linkQueues.reset();
}

const linkQueues = new QueueShare();

/** The link's queue report from the shared board's bytes (Hello.queues), or an empty array when it has not changed. */
export function linkQueueReport(board: Uint8Array): Uint8Array {
  const report = linkQueues.report(board.dataStart, board.byteLength);
  return report == null ? new Uint8Array(0) : Uint8Array.wrap(report);
}

/** The shared board with a fan-out's peer_queues adopted (stamped now), or an empty array when those are not a board. */
export function linkQueueAdopt(board: Uint8Array, peers: Uint8Array): Uint8Array {
  const merged = linkQueues.merge(board.dataStart, board.byteLength, peers.dataStart, peers.byteLength, nowMs);
  return merged == null ? new Uint8Array(0) : Uint8Array.wrap(merged);
}

// The link's share of prefix placements (gateway/peer-prefix.ts): its
// reporter's place in the log outlives a stream, as the link's does.
const linkPrefixReporter = new PrefixShareReporter();
const linkPrefixBatch = new PrefixRecordBatch();

/** The records to report (Hello.prefix_records): the log's since the last call, except the link's own. */
export function linkPrefixReport(log: Uint8Array): Uint8Array {
  const out = new ProtoWriter();
  linkPrefixReporter.encode(log.dataStart, log.byteLength, LINK_WRITER, out);
  return Uint8Array.wrap(out.finish());
}

/** The log with a fan-out's peer_prefix_records appended under the link's writer id, or an empty array if they do not decode. */
export function linkPrefixApply(log: Uint8Array, records: Uint8Array): Uint8Array {
  if (!linkPrefixBatch.decode(records.dataStart, records.byteLength)) return new Uint8Array(0);
  const out = new Uint8Array(LOG_BYTES);
  const whole = log.byteLength == LOG_BYTES;
  if (whole) memory.copy(out.dataStart, log.dataStart, <usize>LOG_BYTES);
  appendRecords(out.dataStart, whole ? LOG_BYTES : 0, linkPrefixBatch.decisions, linkPrefixBatch.count, LINK_WRITER);
  return out;
}

/** Loads the shared memory of refused requests (the filter's llm_gateway.refusals key); false if the bytes are not one. */
export function setRefusals(bytes: Uint8Array): bool {
  return refusals.memory.decode(bytes.dataStart, bytes.byteLength);
}

/** The memory of refused requests after this instance's changes, to share with the others. */
export function refusalTable(): Uint8Array {
  const out = new Uint8Array(refusals.memory.encodedLength());
  refusals.memory.encodeInto(out.dataStart);
  return out;
}


/** A stream routed to `address` sent its first bytes: its `prefillTokens` (from route()) no longer count as work ahead there. */
export function firstBytes(address: string, prefillTokens: i32): void {
  if (prefillTokens <= 0) return;
  inflight.add(hashBuffer(String.UTF8.encode(address)), 0, -1, -prefillTokens);
  // The filter writes the table now, with the releases that waited.
  unpublished.publish();
}

/** This instance's count for `address` in its loaded table. */
export function inflightOf(address: string): i32 {
  return inflight.get(hashBuffer(String.UTF8.encode(address)));
}

/**
 * One refresh tick's exchange of prefix decisions: replays the other
 * instances' records in `log` (empty to start one), appends this instance's
 * new ones and returns the log to share.
 */
export function exchangePrefixLog(log: Uint8Array): Uint8Array {
  logReader.replay(log.dataStart, log.byteLength, writer, router.prefixes, scratch);
  const n = router.drainPending();
  const out = new Uint8Array(LOG_BYTES);
  if (log.byteLength == LOG_BYTES) memory.copy(out.dataStart, log.dataStart, <usize>LOG_BYTES);
  logReader.cursor = appendRecords(out.dataStart, log.byteLength == LOG_BYTES ? LOG_BYTES : 0, router.pendingDecisions, n, writer);
  return out;
}

/**
 * Routes one request body exactly as the filter does. `kind`: 0 chat,
 * 1 completions, 2 responses, 3 other /v1/ paths; `priority`: what the x-llm-priority
 * header asked for (-1 none, -2 not a class, else core/fleet/priority.ts);
 * `holdId`: the caller's handle should the request be held (0: refuse
 * instead), `tenant` its tenant ("" none), `maxWaitMs` the client's own wait
 * bound (-1 none). Returns a JSON object:
 * {"endpoint": "ip:port" | null, "fallbacks": [...], "pool", "model", "target",
 * "class", "downgraded", "retried", "stream", "includeUsage", "prompt": [start, end], "deadlineMs", "explanation"?}
 * (endpoint null when there is no pod to name and Envoy's balancer picks; target is the model served
 * after a canary split), {"held": holdId, ...the same fields without endpoint} (pump() will dispatch or refuse it)
 * or {"status": N, "error": {message, type, param, code},
 * "retryAfterS"?, "explanation"?} (the OpenAI error body; retryAfterS with a 429).
 */
export function route(
  body: Uint8Array, kind: i32, priority: i32, mayClaimCritical: bool, explain: bool, holdId: u32, tenant: string, maxWaitMs: i64,
): string {
  const meta = new RequestMeta();
  meta.priority = priority;
  meta.mayClaimCritical = mayClaimCritical;
  meta.explain = explain;
  meta.holdId = holdId;
  meta.tenant = tenant.length > 0 ? hashBuffer(String.UTF8.encode(tenant)) : 0;
  meta.maxWaitMs = maxWaitMs;
  meta.bytes = body.byteLength;
  const verdict = router.route(body.dataStart, body.byteLength, <ApiKind>kind, view, inflight, refusals, nowMs, meta);
  if (verdict == Verdict.Refused) return refusalJson(explain);
  const req = router.body;
  const fields = ',"pool":' + jsonString(router.pool!.name) +
    ',"model":' + jsonString(req.model) +
    ',"target":' + jsonString(router.target!.name) +
    ',"class":"' + priorityName(router.priority) + '"' +
    ',"downgraded":' + (router.downgraded ? "true" : "false") +
    ',"retried":' + (router.retried ? "true" : "false") +
    ',"stream":' + (req.stream ? "true" : "false") +
    ',"includeUsage":' + (req.includeUsage ? "true" : "false") +
    ',"prompt":[' + req.promptStart.toString() + "," + req.promptEnd.toString() + "]" +
    ',"blind":' + (router.blind ? "true" : "false") +
    ',"deadlineMs":' + router.deadlineMs.toString();
  if (verdict == Verdict.Held) return '{"held":' + holdId.toString() + fields + "}";
  return "{" + pickJson() + fields + (explain ? ',"explanation":' + jsonString(router.explanation) : "") + "}";
}

/** The router's error as {"status", "retryAfterS"?, "explanation"?, "error"}. */
function refusalJson(explain: bool): string {
  const e = router.error!;
  // toJson() is {"error":{...}}: splice the status in front of its member.
  const extra = (router.retryAfterS > 0 ? ',"retryAfterS":' + router.retryAfterS.toString() : "") +
    (explain ? ',"explanation":' + jsonString(router.explanation) : "");
  return '{"status":' + e.status.toString() + extra + "," + e.toJson().substring(1);
}

/** "endpoint" and "fallbacks" of the pick just made, which is counted in its pool's drain when it ends. */
function pickJson(): string {
  const ranked = router.ranked;
  if (ranked.length > 0) {
    routedIn.set(ranked[0].addressHash, router.pool!.load!);
    // Counted on its pod: the filter writes the table now, with what waited.
    unpublished.publish();
  }
  let fallbacks = "";
  for (let i = 1; i < ranked.length; i++) fallbacks += (i > 1 ? "," : "") + jsonString(ranked[i].address);
  return '"endpoint":' + (ranked.length > 0 ? jsonString(ranked[0].address) : "null") + ',"fallbacks":[' + fallbacks + "]" +
    ',"prefillTokens":' + (ranked.length > 0 ? router.prefillTokens : 0).toString();
}

/** Collects what pump() decided, as the filter resumes or answers each held stream. */
class PumpEvents extends HoldSink {
  out: string = "";

  dispatched(h: HeldRequest): void {
    this.add('{"id":' + h.id.toString() + "," + pickJson() + ',"class":"' + priorityName(router.priority) + '"' +
      (h.explain ? ',"explanation":' + jsonString(router.explanation) : "") + "}");
  }

  refused(h: HeldRequest): void {
    this.add('{"id":' + h.id.toString() + "," + refusalJson(h.explain).substring(1));
  }

  private add(event: string): void {
    this.out += (this.out.length > 0 ? "," : "") + event;
  }
}

/**
 * A refresh tick's dispatch: the held requests released or refused now, as
 * a JSON array of {"id", "endpoint", "fallbacks", "class", "explanation"?}
 * and {"id", "status", "retryAfterS"?, "error"}.
 */
export function pump(): string {
  const events = new PumpEvents();
  router.pump(view, inflight, refusals, events, nowMs);
  return "[" + events.out + "]";
}

/** A held request's client went away; false if it was not held. */
export function cancel(holdId: u32): bool {
  return router.cancel(holdId);
}

/** Requests this instance holds. */
export function heldCount(): i32 {
  return router.holds.count;
}

/** The board as last loaded shows requests held somewhere. */
export function boardBusy(): bool {
  return router.board.busy;
}

/** Bounds the held requests (the filter's max_queued_bytes, max_queued_requests). */
export function setHoldLimits(maxBytes: i64, maxRequests: i32): void {
  router.holds.maxBytes = maxBytes;
  router.holds.maxRequests = maxRequests;
}

/** Loads the shared queue board (the filter's llm_gateway.queues key); false if the bytes are not one. */
export function setBoard(bytes: Uint8Array): bool {
  return router.board.decode(bytes.dataStart, bytes.byteLength) || bytes.byteLength == 0;
}

/** The board with this instance's summaries brought up to date, to share with the others. */
export function boardBytes(): Uint8Array {
  router.publish(router.board, nowMs);
  const out = new Uint8Array(router.board.encodedLength());
  router.board.encodeInto(out.dataStart);
  return out;
}

/** How a stream whose chunks went through usageTailPush ended (core/openai/usage.ts StreamEnd); `responses`: a Responses API stream. */
export function usageTailStreamEnd(responses: bool): i32 {
  return usageTail.streamEnd(responses);
}

// The answer side: token counts from a model server's usage object, read as
// the filter reads them (core/openai/usage.ts).
let usageTail = new UsageTail();
const usage = new Usage();

function usageJson(found: bool): string {
  if (!found) return "null";
  return '{"promptTokens":' + usage.promptTokens.toString() + ',"completionTokens":' + usage.completionTokens.toString() + "}";
}

/** The last complete usage in a whole body: {"promptTokens","completionTokens"} or null. */
export function usageIn(body: Uint8Array): string {
  return usageJson(findUsage(body.dataStart, body.byteLength, usage));
}

/** Starts a new answer's tail, as a stream's first response chunk does. */
export function usageTailReset(): void {
  usageTail = new UsageTail();
}

/** One response chunk, of which the filter reads only the part UsageTail.wanted allows (its end). */
export function usageTailPush(chunk: Uint8Array): i32 {
  const wanted = UsageTail.wanted(chunk.byteLength);
  usageTail.push(chunk.dataStart + <usize>(chunk.byteLength - wanted), wanted);
  return wanted;
}

/** What the filter counts when the stream ends: the usage in the tail, or null. */
export function usageTailFind(): string {
  return usageJson(usageTail.find(usage));
}
