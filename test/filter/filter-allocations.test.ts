// Allocations per request, counted in an instrumented build of the filter
// (test/helpers/counted-filter.ts) on the proxy-wasm emulator: after warm-up a
// request allocates only what the proxy-wasm ABI makes the host allocate (the
// buffers it fills through malloc, one per host call that returns bytes) and
// what the request itself must keep (its stream context and the objects that
// go with it); everything else works in buffers kept from one request to the next.
import { beforeAll, describe, expect, it } from "vitest";
import { endpoint, pool, snapshot } from "../../testing/fixtures/snapshot-builders.js";
import { countedFilterModule } from "../helpers/counted-filter.js";
import { EmulatedGateway } from "../helpers/emulated-gateway.js";

const START_MS = 1_750_000_000_000;
const SAMPLE = 16;

describe("allocations per request", () => {
  let gateway: EmulatedGateway;
  const body = '{"model":"llama","messages":[{"role":"user","content":"hi"}]}';
  const headers = { ":method": "POST", ":path": "/v1/chat/completions" };
  const answer = '{"id":"c","object":"chat.completion","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}}';

  beforeAll(() => {
    gateway = new EmulatedGateway({ startMs: START_MS, module: countedFilterModule() });
    gateway.publish(snapshot([pool("p", "llama", [endpoint("10.0.0.1:80"), endpoint("10.0.0.2:80")])]));
    gateway.host.tick();
    for (let i = 0; i < 8; i++) routed(body, [answer]);
    gateway.host.tick();
  }, 120_000);

  function routed(requestBody: string, chunks: string[]): void {
    const stream = gateway.request({ headers: { ...headers, "content-length": String(requestBody.length) }, body: requestBody });
    const primary = stream.requestHeaders.get("x-gateway-destination-endpoint")!.split(",")[0];
    stream.respond(chunks);
    stream.finish({ responseCode: 200, upstreamAddress: primary });
  }

  function counts(): { allocs: number; mallocs: number } {
    const w = gateway.workers[0];
    return { allocs: w.vm.dispatch("alloc_count", w.root, [])!, mallocs: w.vm.dispatch("malloc_count", w.root, [])! };
  }

  /** Allocations per request over SAMPLE requests, and how many of them the host asked for through malloc. */
  function perRequest(run: () => void): { allocs: number; mallocs: number; calls: number } {
    const vm = gateway.workers[0].vm;
    const before = counts();
    vm.resetHostCalls();
    for (let i = 0; i < SAMPLE; i++) run();
    const after = counts();
    return { allocs: (after.allocs - before.allocs) / SAMPLE, mallocs: (after.mallocs - before.mallocs) / SAMPLE, calls: vm.hostCallTotal() / SAMPLE };
  }

  // Measured: a routed request with a one-chunk answer allocates 8.125 blocks; 6 are the host's (header pairs, body,
  // in-flight table, response code, upstream address, the answer's tail), the others its stream context, the model
  // name the router looks up, and now and then the context map's growth. Its answer's 2 KiB tail is reused from an
  // earlier answer, its release from the in-flight table shifts entries in place, and its header pairs are kept as
  // the host gave them.
  it("a routed request allocates 2 blocks: its stream context, and a spare buffer for the header pairs it keeps", () => {
    const r = perRequest(() => routed(body, [answer]));
    expect(r.mallocs).toBe(6);
    // The host's other reads are served by the spare buffers (abi/host-buffers.ts); a map that grows now and then
    // in the sample adds a fraction.
    expect(Math.floor(r.allocs)).toBeLessThanOrEqual(2);
  });

  // Each chunk of a stream is read once (its end) into a host buffer: the spare one (abi/host-buffers.ts), so the
  // allocator is not called at all.
  it("a stream's chunks cost one host buffer each and no allocation", () => {
    const stream = body.replace('"messages"', '"stream":true,"messages"');
    const events = (n: number) => [...Array.from({ length: n - 1 }, () => "data: {}\n\n"), "data: [DONE]\n\n"];
    routed(stream, events(2)); // the model's first stream defines its time-to-first-token counters, once
    const short = perRequest(() => routed(stream, events(2)));
    const long = perRequest(() => routed(stream, events(32)));
    expect(long.mallocs - short.mallocs).toBe(30);
    expect(long.calls - short.calls).toBe(30);
    // Below one block per request over 30 chunks more: an array that grew once in the sample, not a chunk's cost.
    expect(long.allocs - short.allocs).toBeLessThan(1);
  });
});
