// build/filter.wasm, hosted on the proxy-wasm emulator as Envoy hosts it, and
// build/native.wasm are fed the same events (snapshots, heartbeats, time,
// ticks, requests, stream ends) and must take the same decisions, request by
// request: the destination header (primary, then fallbacks) and the pool
// header against the native {endpoint, fallbacks, pool}, and local replies'
// status and OpenAI error body against the native {status, error}. Both
// routers use the seed the filter gives itself, so random tie-breaks must
// match too. Snapshots reach the filter through the link's gRPC stream and
// shared data, as in Envoy (see test/helpers/emulated-gateway.ts).
import { isDeepStrictEqual } from "node:util";
import { beforeAll, describe, expect, it } from "vitest";
import { endpoint, pool, snapshot } from "../../testing/fixtures/snapshot-builders.js";
import { generateCase } from "../../fuzz/cases.js";
import { snapshotOf, NATIVE_POOLS } from "../../fuzz/pools.js";
import { NativeRouter } from "../../testing/native/router.js";
import { EmulatedGateway, type GatewayRoot, type GatewaySettings } from "../helpers/emulated-gateway.js";
import { runBoth, type DecisionPair, type InferencePath, type ParityEvent } from "../parity/events.js";
import { FilterSide } from "../parity/filter-side.js";
import { NativeSide, type NativeSideOptions } from "../parity/native-side.js";
import { randomScenario } from "../parity/scenarios.js";

const START_MS = 1_750_000_000_000;
const SCENARIO = { requests: 250, maxAdvanceMs: 1_500, silenceMs: 5_000 };

/**
 * The seed GatewayWorker.applyConfig gives its Router: nowMillis() ^ (worker id << 32),
 * the worker id counting configured worker VMs from 1 (gateway/worker-id.ts).
 */
function filterSeed(worker: GatewayRoot, workerId = 1): number {
  return Number(BigInt(worker.configuredAtMs) ^ (BigInt(workerId) << 32n));
}

interface Setup {
  settings: Partial<GatewaySettings>;
  /** What a request gets once the view is too old. */
  staleDecision: "blind" | "stale 503";
  /** The same policy in the native build's terms (the filter's defaults when settings leave it out). */
  viewPolicy: { maxAgeMs: number; policy: "fail-open" | "reject" };
  health: { ejectAfter: number; ejectMs: number };
}

const SETUPS: Record<string, Setup> = {
  "default settings": {
    settings: {},
    staleDecision: "blind",
    viewPolicy: { maxAgeMs: 3_000, policy: "fail-open" },
    health: { ejectAfter: 3, ejectMs: 10_000 },
  },
  "stale view rejected, pods ejected after one failure": {
    settings: {
      staleView: { maxAgeMs: 2_000, policy: "reject", retryAfterS: 2 },
      passiveHealth: { ejectAfterFailures: 1, ejectMs: 1_500 },
    },
    staleDecision: "stale 503",
    viewPolicy: { maxAgeMs: 2_000, policy: "reject" },
    health: { ejectAfter: 1, ejectMs: 1_500 },
  },
};

interface Run {
  pairs: DecisionPair[];
  gateway: EmulatedGateway;
  blind: ReadonlySet<string>;
}

/** Runs `events` on the filter (a fresh emulated gateway with `workers` worker VMs) and on native routers set up the same way. */
async function runParity(
  events: readonly ParityEvent[],
  setup: Setup,
  tweak: (seeds: number[]) => Partial<NativeSideOptions> = () => ({}),
  workers = 1,
): Promise<Run> {
  const gateway = new EmulatedGateway({ startMs: START_MS, settings: setup.settings, workers });
  const seeds = gateway.workers.map((w, i) => filterSeed(w, i + 1));
  const routers = await Promise.all(gateway.workers.map(() => NativeRouter.load()));
  const native = new NativeSide(routers, {
    startMs: gateway.workers[0].configuredAtMs,
    seeds,
    viewPolicy: setup.viewPolicy,
    health: setup.health,
    ...tweak(seeds),
  });
  return { pairs: runBoth(events, new FilterSide(gateway), native), gateway, blind: native.blind };
}

function firstMismatch(pairs: DecisionPair[]): DecisionPair | undefined {
  return pairs.find((p) => !isDeepStrictEqual(p.filter, p.native));
}

/**
 * How often each kind of decision occurred: "ranked", "blind", "stale 503" or
 * the status of another refusal. `blind`: the requests routed on a view too
 * old to score on (the native side knows; the headers look alike).
 */
function tally(pairs: DecisionPair[], blind: ReadonlySet<string> = new Set()): Record<string, number> {
  const out: Record<string, number> = {};
  for (const { filter: d, request } of pairs) {
    const stale = !d.routed && JSON.stringify(d.body).includes("lost its view");
    const key = stale ? "stale 503" : !d.routed ? String(d.status) : blind.has(request) ? "blind" : "ranked";
    out[key] = (out[key] ?? 0) + 1;
  }
  return out;
}

function eventBody(events: ParityEvent[], i: number): string {
  const e = events[i];
  if (e.type !== "request") throw new Error(`event ${i} is not a request`);
  return typeof e.body === "string" ? e.body : Buffer.from(e.body).toString();
}

describe("the filter decides as the native build does", () => {
  for (const [name, setup] of Object.entries(SETUPS)) {
    for (const seed of [1, 2, 3]) {
      it(`${name}, scenario seed ${seed}`, async () => {
        const { pairs, gateway, blind } = await runParity(randomScenario(seed, SCENARIO), setup);
        expect(firstMismatch(pairs)).toBeUndefined();
        // The scenario must have exercised ranking, staleness and refusals, or equality would say little.
        const seen = tally(pairs, blind);
        expect(seen.ranked).toBeGreaterThan(80);
        expect(seen[setup.staleDecision]).toBeGreaterThan(0);
        expect(seen["400"]).toBeGreaterThan(20);
        expect(seen["404"]).toBeGreaterThan(20);
        // The filter's own counters tell the same story (they reach Envoy on the next tick).
        gateway.host.tick();
        const m = (name: string) => gateway.host.metricTotal(`llm_gateway.${name}`);
        expect(m("requests_routed_total")).toBe(seen.ranked + (seen.blind ?? 0));
        expect(m("requests_routed_blind_total")).toBe(seen.blind ?? 0);
        expect(m("pod_picks_total")).toBe(seen.ranked);
        expect(m("requests_refused_total;status=400")).toBe(seen["400"]);
        expect(m("requests_refused_total;status=404;reason=model_not_found")).toBe(seen["404"]);
        expect(m("requests_refused_total;status=503")).toBe((seen["503"] ?? 0) + (seen["stale 503"] ?? 0));
      });
    }
  }

  for (const seed of [1, 2, 3]) {
    it(`admission, classes and canary splits on two workers, scenario seed ${seed}`, async () => {
      const events = randomScenario(seed, { ...SCENARIO, requests: 400, workers: 2, failures: false, traffic: true });
      const { pairs } = await runParity(events, SETUPS["default settings"], () => ({}), 2);
      expect(firstMismatch(pairs)).toBeUndefined();
      // Refusals for lack of room, with their Retry-After, and requests served as a canary target must have happened.
      const refused = pairs.filter((p) => !p.filter.routed && p.filter.status === 429);
      expect(refused.length).toBeGreaterThan(10);
      expect(refused.every((p) => !p.filter.routed && /^[1-9]\d*$/.test(p.filter.retryAfter ?? ""))).toBe(true);
      const canary = pairs.filter((p) => p.filter.routed && p.filter.served !== JSON.parse(String(eventBody(events, p.event))).model);
      expect(canary.length).toBeGreaterThan(5);
      expect(tally(pairs).ranked).toBeGreaterThan(60);
    });
  }

  for (const seed of [1, 2, 3]) {
    it(`holding: requests held, released on later ticks, refused past their budgets, left by their clients, on two workers, scenario seed ${seed}`, async () => {
      const events = randomScenario(seed, { ...SCENARIO, requests: 1_200, workers: 2, failures: false, traffic: true, queueing: true });
      const { pairs, gateway } = await runParity(events, SETUPS["default settings"], () => ({ holds: true }), 2);
      expect(firstMismatch(pairs)).toBeUndefined();
      // Requests were held, and held ones were later released to a pod and refused past their budget (clients leaving
      // while held is rarer here; the unit and end-to-end tests have it).
      const requestEvents = new Set(events.flatMap((e, i) => (e.type === "request" ? [i] : [])));
      const held = pairs.filter((p) => "held" in p.filter && requestEvents.has(p.event));
      const later = pairs.filter((p) => !requestEvents.has(p.event) || events[p.event].type !== "request" || (events[p.event] as { id: string }).id !== p.request);
      expect(held.length).toBeGreaterThan(30);
      expect(later.filter((p) => "routed" in p.filter && p.filter.routed).length).toBeGreaterThan(5);
      expect(later.filter((p) => "status" in p.filter && p.filter.status === 429).length).toBeGreaterThan(10);
      // The filter's own count of what it held agrees.
      gateway.host.tick();
      expect(gateway.host.metricTotal("llm_gateway.class_held_total")).toBe(held.length);
    });
  }

  for (const seed of [1, 2]) {
    it(`two workers sharing the in-flight table and the prefix log, scenario seed ${seed}`, async () => {
      const events = randomScenario(seed, { ...SCENARIO, workers: 2, failures: false, prefixes: true });
      const { pairs, gateway } = await runParity(events, SETUPS["default settings"], () => ({}), 2);
      expect(firstMismatch(pairs)).toBeUndefined();
      expect(tally(pairs).ranked).toBeGreaterThan(80);
      // Both workers routed, and the shared keys the decisions depend on were written.
      const workersUsed = new Set(events.flatMap((e) => (e.type === "request" ? [e.worker ?? 0] : [])));
      expect(workersUsed.size).toBe(2);
      const vmId = gateway.workers[0].vm.vmId;
      expect(gateway.host.sharedData.get(vmId, "llm_gateway.inflight")).toBeDefined();
      expect(gateway.host.sharedData.get(vmId, "llm_gateway.prefix_log")?.value.length).toBeGreaterThan(0);
    });
  }

  it("on the fuzz corpus (escapes, invalid UTF-8, duplicate keys, deep nesting)", async () => {
    const paths: Record<string, InferencePath> = { chat: "/v1/chat/completions", completions: "/v1/completions", other: "/v1/embeddings" };
    const events: ParityEvent[] = [{ type: "snapshot", snapshot: snapshotOf(NATIVE_POOLS) }, { type: "tick" }];
    for (let i = 0; i < 400; i++) {
      const c = generateCase("native", 11, i);
      events.push({ type: "request", id: `f${i}`, path: paths[c.kind], body: c.body, chunks: 1 + (i % 4) });
    }
    const { pairs } = await runParity(events, SETUPS["default settings"]);
    expect(firstMismatch(pairs)).toBeUndefined();
    const seen = tally(pairs);
    expect(seen.ranked).toBeGreaterThan(20);
    expect(seen["400"]).toBeGreaterThan(20);
  });

  it("the filter's clock and view move on its ticks, and its first request loads the first snapshot", async () => {
    const snap = snapshot([pool("p", "llama", [endpoint("10.0.0.1:80"), endpoint("10.0.0.2:80", { waiting: 4 })])]);
    const chat = (id: string): ParityEvent => ({ type: "request", id, path: "/v1/chat/completions", body: '{"model":"llama","messages":[]}' });
    const events: ParityEvent[] = [
      { type: "snapshot", snapshot: snap }, chat("before any tick"),
      { type: "advance", ms: 3_001 }, chat("past the bound, before a tick"), { type: "tick" }, chat("stale"),
      { type: "heartbeat" }, chat("heard, before a tick"), { type: "tick" }, chat("heard"),
    ];
    const { pairs } = await runParity(events, SETUPS["default settings"]);
    expect(firstMismatch(pairs)).toBeUndefined();
    // Past the bound (seen at the tick) the pods last known good are named with
    // the fewest of the gateway's requests in flight first: 10.0.0.1 holds the
    // first two, so 10.0.0.2 takes both stale ones; once heard from, scores decide again.
    expect(pairs.map((p) => p.filter.routed && p.filter.destination?.[0])).toEqual(
      ["10.0.0.1:80", "10.0.0.1:80", "10.0.0.2:80", "10.0.0.2:80", "10.0.0.1:80"],
    );
  });

  // The two checks below show the scenarios are not too easy: what the native side is told matters.
  it("the seed is what makes tie-breaks agree: with another seed the native side decides differently", async () => {
    const { pairs, gateway } = await runParity(randomScenario(1, SCENARIO), SETUPS["default settings"], (seeds) => ({ seeds: seeds.map((s) => s + 1) }));
    expect(firstMismatch(pairs)).toBeDefined();
    expect(gateway.host.metricTotal("llm_gateway.requests_routed_total")).toBeGreaterThan(0);
  });

  it("stream ends feed passive health: a native side that never ejects decides differently", async () => {
    const setup = SETUPS["stale view rejected, pods ejected after one failure"];
    const { pairs, gateway } = await runParity(randomScenario(2, SCENARIO), setup, () => ({ health: { ejectAfter: 1_000_000, ejectMs: 1 } }));
    expect(firstMismatch(pairs)).toBeDefined();
    expect(gateway.host.metric("llm_gateway.endpoint_failures_total")).toBeGreaterThan(0);
  });
});

describe("host calls per request", () => {
  let gateway: EmulatedGateway;
  const body = '{"model":"llama","messages":[{"role":"user","content":"hi"}]}';
  const headers = { ":method": "POST", ":path": "/v1/chat/completions", "content-length": String(body.length) };
  const answer = '{"id":"c","object":"chat.completion","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}}';

  beforeAll(() => {
    gateway = new EmulatedGateway({ startMs: START_MS });
    gateway.publish(snapshot([pool("p", "llama", [endpoint("10.0.0.1:80"), endpoint("10.0.0.2:80")])]));
    gateway.host.tick();
    // The first routed request and the first refusal define their counters once (per pod, per reason).
    warmUp();
    gateway.host.tick();
  });

  function warmUp(): void {
    for (let i = 0; i < 8; i++) routed(undefined, [answer]);
    const unknown = '{"model":"nope","messages":[]}';
    gateway.request({ headers: { ...headers, "content-length": String(unknown.length) }, body: unknown }).finish();
  }

  /** One routed request that ends 200, with its answer in `chunks` (none: no body passed the filter). */
  function routed(requestBody = body, chunks: string[] = []): void {
    const stream = gateway.request({ headers: { ...headers, "content-length": String(requestBody.length) }, body: requestBody });
    const destination = stream.requestHeaders.get("x-gateway-destination-endpoint");
    expect(destination).toMatch(/^\d+\.\d+\.\d+\.\d+:\d+(,|$)/);
    const primary = destination!.split(",")[0];
    if (chunks.length > 0) stream.respond(chunks);
    stream.finish({ responseCode: 200, upstreamAddress: primary });
  }

  function measure(run: () => void): { total: number; byImport: Record<string, number> } {
    const vm = gateway.workers[0].vm;
    vm.resetHostCalls();
    run();
    return { total: vm.hostCallTotal(), byImport: vm.hostCalls() };
  }

  // Sixteen in a row: one decision in 16 is timed (two clock reads), so any sixteen cost the same.
  const SAMPLE = 16;
  const TIMED = 2;
  const timedCalls = (run: () => void) => measure(() => {
    for (let i = 0; i < SAMPLE; i++) run();
  });

  // Measured per request: get_header_map_pairs 1, get_buffer_bytes 1, get/set_shared_data 1+1 (in-flight: the
  // decision's read and its write, which also publishes the release of the request before), set_header_map_pairs 1
  // (pool, model name, base model, destination, and any per-try timeout, stream route or canary content-length,
  // all in the one call); at the end get_property 3 (response.code, response.flags: no answer body reached its end
  // here, upstream.address), and its release waits for the next write. Counters wait for the tick, and so do the
  // timed decisions' histogram counts.
  it("a routed request that ends 200 makes 8 host calls, one of them setting all its routing headers", () => {
    const calls = timedCalls(() => routed());
    expect(calls.total, JSON.stringify(calls.byImport)).toBe(SAMPLE * 8 + TIMED);
    expect(calls.byImport.proxy_set_header_map_pairs).toBe(SAMPLE);
    expect(calls.byImport.proxy_replace_header_map_value ?? 0).toBe(0);
    expect(calls.byImport.proxy_get_shared_data).toBe(SAMPLE);
    expect(calls.byImport.proxy_set_shared_data).toBe(SAMPLE);
    expect(calls.byImport.proxy_get_current_time_nanoseconds).toBe(TIMED);
    expect(calls.byImport.proxy_record_metric ?? 0).toBe(0);
    expect(calls.byImport.proxy_increment_metric ?? 0).toBe(0);
  });

  // Any answer that is not a stream ends with its usage: each chunk costs one get_buffer_bytes (its last 2 KiB
  // at most). An answer whose body ended here with a 2xx was not cut short: its response flags are not read.
  it("reading a non-streamed answer's token counts costs one call per chunk, and an answer that ended whole saves the flags' read", () => {
    const whole = timedCalls(() => routed(body, [answer]));
    expect(whole.total, JSON.stringify(whole.byImport)).toBe(SAMPLE * 8 + TIMED);
    expect(whole.byImport.proxy_get_property).toBe(SAMPLE * 2);
    const half = answer.length >> 1;
    expect(timedCalls(() => routed(body, [answer.slice(0, half), answer.slice(half)])).total).toBe(SAMPLE * 9 + TIMED);
  });

  // A stream's route header (with the idle bound) goes in the same call as the others; it reads each
  // chunk's end: its last 16 bytes when only the terminal event matters, its last 2 KiB when it
  // carries usage. It reads the clock where its time to first token starts (after its decision) and at
  // its first bytes, which also take its prompt off its pod's prefill at once: get/set_shared_data 1+1
  // (the other workers must not see a prefill that is over). Ending with its terminal event, its
  // response flags are not read.
  it("a stream costs one read per chunk, whether or not it asked for usage, a clock read after its decision and three calls at its first bytes", () => {
    const events = ["data: {}\n\n", "data: {}\n\n", "data: {}\n\n", "data: [DONE]\n\n"];
    const stream = body.replace('"messages"', '"stream":true,"messages"');
    routed(stream, events); // the model's first stream defines its time-to-first-token counters, once
    // A timed decision's start read is where its time to first token starts: one read, not two, more.
    expect(timedCalls(() => routed(stream, events)).total).toBe(SAMPLE * (11 + events.length) + TIMED - 1);
    const withUsage = body.replace('"messages"', '"stream":true,"stream_options":{"include_usage":true},"messages"');
    expect(timedCalls(() => routed(withUsage, events)).total).toBe(SAMPLE * (11 + events.length) + TIMED - 1);
  });

  // Measured: get_header_map_pairs 1, get_buffer_bytes 1, replace_header_map_value 1 (x-gateway-reply),
  // send_local_response 1; nothing at the end (its counters wait for the tick).
  it("a request for an unknown model makes 4 host calls (header pairs, body, marker header, local reply)", () => {
    const unknown = '{"model":"nope","messages":[]}';
    const calls = timedCalls(() => {
      const stream = gateway.request({ headers: { ...headers, "content-length": String(unknown.length) }, body: unknown });
      expect(stream.localResponse?.status).toBe(404);
      stream.finish();
    });
    expect(calls.total, JSON.stringify(calls.byImport)).toBe(SAMPLE * 4 + TIMED);
  });

  // The releases of the requests above reach the shared table on the worker's next tick at the latest: one read, one write.
  it("a tick after requests ended publishes their releases (in-flight read + write), and then the table counts none", () => {
    routed(body, [answer]);
    const calls = measure(() => gateway.workers[0].vm.tick());
    expect(calls.byImport.proxy_get_shared_data, JSON.stringify(calls.byImport)).toBeGreaterThanOrEqual(1);
    expect(calls.byImport.proxy_set_shared_data).toBe(1);
    const table = gateway.host.sharedData.get(gateway.workers[0].vm.vmId, "llm_gateway.inflight")!.value;
    expect(new DataView(table.buffer, table.byteOffset, table.byteLength).getUint32(0, true)).toBe(0);
  });

  // Measured: get_current_time_nanoseconds 1, get_shared_data 2 (the health ledger, absent; the snapshot cell).
  it("a worker's tick with nothing new makes at most 3 host calls (clock, health ledger, snapshot cell)", () => {
    gateway.workers[0].vm.tick(); // hands over the counts of the requests above
    const calls = measure(() => gateway.workers[0].vm.tick());
    expect(calls.total, JSON.stringify(calls.byImport)).toBeLessThanOrEqual(3);
  });

  // The view's age moves every tick, but is sent at most once a second; the pools' gauges only when they change.
  it("once a second a tick also sets the view's age gauge: one call more", () => {
    gateway.workers[0].vm.tick();
    gateway.host.advance(1_000);
    const calls = measure(() => gateway.workers[0].vm.tick());
    expect(calls.byImport.proxy_record_metric, JSON.stringify(calls.byImport)).toBe(1);
    expect(calls.total).toBeLessThanOrEqual(4);
    expect(gateway.host.metric("llm_gateway.snapshot_age_seconds")).toBeGreaterThanOrEqual(1);
  });
});
