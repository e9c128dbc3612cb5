// One request's life in the native build, as the filter's stream lives it:
// routed (or held, then released or refused by the tick's pump), its first
// bytes, its end. Results come back as JSON strings.
import { ApiKind } from "../core/openai/request";
import { RequestMeta, Verdict } from "../core/scheduling/router";
import { HoldSink } from "../core/scheduling/held-dispatch";
import { HeldRequest } from "../core/queueing/held-request";
import { priorityName } from "../core/fleet/priority";
import { jsonString } from "../core/openai/errors";
import { hashBuffer } from "../core/wire/hash";
import { Ledgers, NO_RESPONSE, RequestEnd } from "../core/lifecycle";
import { health, healthRules, inflight, nowMs, refusals, routedIn, router, unpublished, view } from "./instance";

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

/** The addresses the last pick scored, in slot order, comma-separated. */
export function candidates(): string {
  const c = router.candidates;
  let out = "";
  for (let i = 0; i < c.length; i++) out += (i > 0 ? "," : "") + c[i].address;
  return out;
}

/** Some model of the installed snapshot weighs a scorer that records its picks: the filter then shares the prefix log. */
export function recordsPicks(): bool {
  return view.current != null && router.recordsPicks(view.current!);
}

/** A stream routed to `address` sent its first bytes: its `prefillTokens` (from route()) no longer count as work ahead there. */
export function firstBytes(address: string, prefillTokens: i32): void {
  if (prefillTokens <= 0) return;
  inflight.add(hashBuffer(String.UTF8.encode(address)), 0, -1, -prefillTokens);
  // The filter writes the table now, with the releases that waited.
  unpublished.publish();
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
