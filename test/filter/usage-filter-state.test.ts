// With an access log configured, the filter leaves each answer's usage in
// the stream's filter state for it: one host call per answer that carries
// usage, none without an access log.
import { describe, expect, it } from "vitest";
import { endpoint, pool, snapshot } from "../../testing/fixtures/snapshot-builders.js";
import { EmulatedGateway, type GatewaySettings } from "../helpers/emulated-gateway.js";

const body = '{"model":"llama","messages":[{"role":"user","content":"hi"}]}';
const headers = { ":method": "POST", ":path": "/v1/chat/completions", "content-length": String(body.length) };
const answer = '{"id":"c","object":"chat.completion","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}}';

function gatewayWith(settings: Partial<GatewaySettings>): EmulatedGateway {
  const gateway = new EmulatedGateway({ startMs: 1_750_000_000_000, settings });
  gateway.publish(snapshot([pool("p", "llama", [endpoint("10.0.0.1:80"), endpoint("10.0.0.2:80")])]));
  gateway.host.tick();
  return gateway;
}

/** One routed request answered with `chunks`; its filter state and the host calls it made. */
function routed(gateway: EmulatedGateway, chunks: string[]): { state: Map<string, Uint8Array>; calls: Record<string, number>; total: number } {
  const vm = gateway.workers[0].vm;
  vm.resetHostCalls();
  const stream = gateway.request({ headers, body });
  stream.respond(chunks);
  stream.finish({ responseCode: 200, upstreamAddress: stream.requestHeaders.get("x-gateway-destination-endpoint")!.split(",")[0] });
  return { state: stream.filterState, calls: vm.hostCalls(), total: vm.hostCallTotal() };
}

describe("usage in the filter state", () => {
  it("is set once, with both counts, when an access log reads it, and costs nothing without one", () => {
    const logged = routed(gatewayWith({ accessLog: {} }), [answer.slice(0, 40), answer.slice(40)]);
    expect(JSON.parse(Buffer.from(logged.state.get("llm_gateway_usage")!).toString())).toEqual({ prompt_tokens: 9, completion_tokens: 3 });
    expect(logged.calls.proxy_set_property).toBe(1);

    const plain = routed(gatewayWith({}), [answer.slice(0, 40), answer.slice(40)]);
    expect(plain.state.size).toBe(0);
    expect(plain.calls.proxy_set_property ?? 0).toBe(0);
    // The same request and answer (each gateway's first, so both time their decision): one call apart.
    expect(logged.total - plain.total).toBe(1);
  });

  it("is not set for an answer without usage", () => {
    const { state, calls } = routed(gatewayWith({ accessLog: {} }), ['{"id":"c","choices":[]}']);
    expect(state.size).toBe(0);
    expect(calls.proxy_set_property ?? 0).toBe(0);
  });
});
