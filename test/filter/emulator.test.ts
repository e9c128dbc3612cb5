// The proxy-wasm emulator (testing/proxy-wasm-emulator) against the host behaviour it
// claims: ABI status codes and buffer rules on a hand-written probe module,
// Envoy's shared-data semantics, and the gateway's filter and link on several
// workers sharing one store.
import binaryen from "binaryen";
import { describe, expect, it } from "vitest";
import { endpoint, pool, snapshot } from "../../testing/fixtures/snapshot-builders.js";
import { CONTRACT } from "../../host/contract.js";
import { snapshotServiceDefinition } from "../../host/proto.js";
import { decodePairs, encodePairs, PluginRejected, ProxyWasmHost, Status, type HttpStream } from "../../testing/proxy-wasm-emulator/index.js";
import { SharedData } from "../../testing/proxy-wasm-emulator/shared-data.js";
import { EmulatedGateway, filterWasmModule, renderedPlugins } from "../helpers/emulated-gateway.js";

const START_MS = 1_750_000_000_000;

// A module that calls host functions with chosen arguments. Its malloc grows
// memory by a page per call and returns the new page, so every value the host
// hands over lands in memory that did not exist when the host call began.
const PROBE = `
(module
  (import "env" "proxy_log" (func $log (param i32 i32 i32) (result i32)))
  (import "env" "proxy_get_buffer_bytes" (func $buffer (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_get_shared_data" (func $get (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_http_call" (func $http (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "key")
  (func (export "malloc") (param $size i32) (result i32)
    (i32.mul (memory.grow (i32.const 1)) (i32.const 65536)))
  (func (export "proxy_on_configure") (param $id i32) (param $size i32) (result i32)
    (i32.eqz (call $buffer (i32.const 7) (i32.const 0) (local.get $size) (i32.const 0) (i32.const 4))))
  (func (export "read_configuration") (result i32)
    (call $buffer (i32.const 7) (i32.const 0) (i32.const 100) (i32.const 0) (i32.const 4)))
  (func (export "read_buffer_type_9") (result i32)
    (call $buffer (i32.const 9) (i32.const 0) (i32.const 1) (i32.const 0) (i32.const 4)))
  (func (export "log_out_of_bounds") (result i32)
    (call $log (i32.const 2) (i32.const 0x7ffffff0) (i32.const 100)))
  (func (export "get_key") (result i32)
    (call $get (i32.const 16) (i32.const 3) (i32.const 0) (i32.const 4) (i32.const 8)))
  (func (export "returned_size") (result i32) (i32.load (i32.const 4)))
  (func (export "returned_first_byte") (result i32) (i32.load8_u (i32.load (i32.const 0))))
  (func (export "returned_cas") (result i32) (i32.load (i32.const 8)))
  (func (export "http_call") (result i32)
    (call $http (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0)
                (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0))))
`;

function probe() {
  const mod = binaryen.parseText(PROBE);
  if (!mod.validate()) throw new Error("the probe module does not validate");
  const host = new ProxyWasmHost(START_MS);
  const vm = host.createVm(new WebAssembly.Module(Buffer.from(mod.emitBinary())), { vmId: "probe" });
  const root = vm.startPlugin({ name: "probe", rootId: "probe", configuration: "hello" });
  const call = (name: string) => vm.dispatch(name, root, []);
  return { host, vm, call };
}

describe("host functions", () => {
  it("implements every host function build/filter.wasm imports", () => {
    const gw = new EmulatedGateway({ startMs: START_MS });
    expect(gw.workers[0].vm.unimplementedImports).toEqual([]);
  });

  it("throws, naming it, when the plugin calls a host function the emulator does not implement", () => {
    const { vm, call } = probe();
    expect(vm.unimplementedImports).toEqual(["proxy_http_call"]);
    expect(() => call("http_call")).toThrow(/proxy_http_call is not implemented/);
    expect(vm.hostCalls().proxy_http_call).toBe(1);
  });

  it("shows the plugin configuration only while the plugin is configured", () => {
    // proxy_on_configure accepted: it could read all of it.
    const { call } = probe();
    expect(call("read_configuration")).toBe(Status.NotFound);
  });

  it("answers BAD_ARGUMENT for an unknown buffer type and INVALID_MEMORY_ACCESS for a pointer out of bounds", () => {
    const { call } = probe();
    expect(call("read_buffer_type_9")).toBe(Status.BadArgument);
    expect(call("log_out_of_bounds")).toBe(Status.InvalidMemoryAccess);
  });

  it("copies values into memory the plugin allocated, even when allocating grew the memory", () => {
    const { host, call } = probe();
    expect(call("get_key")).toBe(Status.NotFound);
    host.sharedData.set("probe", "key", Buffer.from("value"), 0);
    expect(call("get_key")).toBe(Status.Ok);
    expect(call("returned_size")).toBe(5);
    expect(String.fromCharCode(call("returned_first_byte")!)).toBe("v");
    expect(call("returned_cas")).toBe(host.sharedData.get("probe", "key")!.cas);
  });

  it("rejects a plugin whose configuration it refuses, as Envoy rejects the filter", () => {
    const host = new ProxyWasmHost(START_MS);
    const { filter } = renderedPlugins({ maxBodyBytes: 1024 });
    const vm = host.createVm(filterWasmModule(), { vmId: filter.vmId });
    expect(() => vm.startPlugin({ ...filter.plugin, configuration: '{"max_body_byte":1}' })).toThrow(PluginRejected);
    expect(vm.logs.at(-1)).toMatchObject({ level: "critical", message: expect.stringContaining("unknown setting 'max_body_byte'") });
  });

  it("takes a body limit up to the contract's, which the config and the renderer stop at too", () => {
    const host = new ProxyWasmHost(START_MS);
    const limit = CONTRACT.limits.maxBodyBytes;
    const { filter } = renderedPlugins({ maxBodyBytes: limit });
    expect(() => host.createVm(filterWasmModule(), { vmId: filter.vmId }).startPlugin(filter.plugin)).not.toThrow();
    const vm = host.createVm(filterWasmModule(), { vmId: filter.vmId });
    expect(() => vm.startPlugin({ ...filter.plugin, configuration: JSON.stringify({ max_body_bytes: limit + 1 }) })).toThrow(PluginRejected);
    expect(() => renderedPlugins({ maxBodyBytes: limit + 1 })).toThrow(/maxBodyBytes/);
  });
});

describe("shared data, as Envoy keeps it", () => {
  it("writes with CAS 0 always, with a non-zero CAS only if it matches, and stamps every write", () => {
    const data = new SharedData();
    expect(data.get("vm", "k")).toBeUndefined();
    expect(data.set("vm", "k", Buffer.from("a"), 12345)).toBe(Status.Ok); // a new key ignores the CAS
    const first = data.get("vm", "k")!.cas;
    expect(data.set("vm", "k", Buffer.from("b"), first + 1)).toBe(Status.CasMismatch);
    expect(Buffer.from(data.get("vm", "k")!.value).toString()).toBe("a");
    expect(data.set("vm", "k", Buffer.from("c"), first)).toBe(Status.Ok);
    const second = data.get("vm", "k")!.cas;
    expect(second).not.toBe(first);
    expect(data.set("vm", "k", Buffer.from("d"), first)).toBe(Status.CasMismatch);
    expect(data.set("vm", "k", Buffer.from("e"), 0)).toBe(Status.Ok);
    expect(Buffer.from(data.get("vm", "k")!.value).toString()).toBe("e");
  });

  it("keeps one store per vm_id, with CAS stamps unique across keys and VMs", () => {
    const data = new SharedData();
    data.set("a", "k", Buffer.from("1"), 0);
    data.set("b", "k", Buffer.from("2"), 0);
    data.set("a", "other", Buffer.from("3"), 0);
    expect(Buffer.from(data.get("a", "k")!.value).toString()).toBe("1");
    expect(Buffer.from(data.get("b", "k")!.value).toString()).toBe("2");
    expect(new Set([data.get("a", "k")!.cas, data.get("b", "k")!.cas, data.get("a", "other")!.cas]).size).toBe(3);
  });
});

describe("header pairs", () => {
  it("round-trips and, like Envoy, reads a malformed buffer as no pairs", () => {
    const pairs = [[":path", "/v1/models"], ["x-a", ""], ["x-a", "caf\u00e9"]] as const;
    const bytes = encodePairs(pairs);
    expect(decodePairs(bytes)).toEqual(pairs);
    expect(decodePairs(bytes.subarray(0, bytes.length - 1))).toEqual([]);
    expect(decodePairs(Uint8Array.of(1, 0, 0))).toEqual([]);
  });
});

describe("the gateway on several workers", () => {
  const TWO_PODS = snapshot([pool("p", "llama", [endpoint("10.0.0.1:80"), endpoint("10.0.0.2:80", { waiting: 5 })])]);
  const CHAT = '{"model":"llama","messages":[{"role":"user","content":"hi"}]}';
  const post = (extra: Record<string, string> = {}) => ({
    headers: { ":method": "POST", ":path": "/v1/chat/completions", "content-length": String(CHAT.length), ...extra },
    body: CHAT,
  });
  const primary = (s: HttpStream) => s.requestHeaders.get("x-gateway-destination-endpoint")?.split(",")[0];

  it("the link opens one stream to the aggregator's cluster and says hello", () => {
    const gw = new EmulatedGateway({ startMs: START_MS });
    const stream = gw.aggregatorStream();
    expect(stream).toMatchObject({ cluster: "llm_gateway_aggregator", service: "llmgateway.v1.SnapshotService", method: "Watch" });
    expect(snapshotServiceDefinition.Watch.requestDeserialize(Buffer.from(stream.sent[0]))).toMatchObject({ client: "envoy" });
  });

  it("every worker loads a published snapshot on its next tick, not before", () => {
    const gw = new EmulatedGateway({ startMs: START_MS, workers: 3 });
    gw.publish(TWO_PODS);
    expect(gw.host.metric("llm_gateway.snapshot_updates_total")).toBe(0);
    gw.host.tick();
    expect(gw.host.metric("llm_gateway.snapshot_updates_total")).toBe(3);
    for (let w = 0; w < 3; w++) expect(primary(gw.request(post(), w))).toBe("10.0.0.1:80");
  });

  it("a pod failing on one worker is avoided by the others once they tick", () => {
    const gw = new EmulatedGateway({ startMs: START_MS, workers: 2 });
    gw.publish(TWO_PODS);
    gw.host.tick();
    for (let i = 0; i < 3; i++) gw.request(post(), 0).finish({ responseCode: 502, upstreamAddress: "10.0.0.1:80" });
    gw.workers[0].vm.tick(); // counters reach Envoy on the tick
    expect(gw.host.metric("llm_gateway.endpoint_failures_total")).toBe(3);
    expect(primary(gw.request(post(), 0))).toBe("10.0.0.2:80");
    expect(primary(gw.request(post(), 1))).toBe("10.0.0.1:80");
    gw.workers[1].vm.tick();
    expect(primary(gw.request(post(), 1))).toBe("10.0.0.2:80");
  });

  it("the link reconnects after its backoff when the aggregator closes the stream", () => {
    const gw = new EmulatedGateway({ startMs: START_MS });
    const first = gw.aggregatorStream();
    gw.link.vm.grpcClose(first.token, 14);
    expect(gw.link.vm.logs.at(-1)?.level).toBe("warn");
    gw.host.tick();
    expect(gw.link.vm.grpcStreams.filter((s) => s.state === "open")).toEqual([]);
    gw.host.advance(100);
    gw.host.tick();
    expect(gw.aggregatorStream().token).not.toBe(first.token);
  });

  it("removes client-sent x-gateway-* headers before routing", () => {
    const gw = new EmulatedGateway({ startMs: START_MS });
    gw.publish(TWO_PODS);
    gw.host.tick();
    const stream = gw.request(post({ "x-gateway-destination-endpoint": "6.6.6.6:1", "X-Gateway-Pool": "evil" }));
    expect(stream.requestHeaders.get("x-gateway-destination-endpoint")).toBe("10.0.0.1:80,10.0.0.2:80");
    expect(stream.requestHeaders.get("x-gateway-pool")).toBe("p");
    gw.host.tick(); // counters reach Envoy on the tick
    expect(gw.host.metric("llm_gateway.client_control_headers_removed_total")).toBe(2);
  });

  it("refuses an oversized body at the headers; Envoy then delivers nothing more", () => {
    const gw = new EmulatedGateway({ startMs: START_MS, settings: { maxBodyBytes: 16 } });
    const stream = gw.workers[0].vm.createStream(gw.workers[0].root);
    stream.sendHeaders(post().headers, false);
    expect(stream.localResponse).toMatchObject({ status: 413, headers: [["content-type", "application/json"]] });
    expect(JSON.parse(stream.localResponse!.body).error.code).toBe("request_too_large");
    expect(() => stream.sendBody(Buffer.from(CHAT), true)).toThrow(/answered locally/);
  });

  it("under the reject policy a stale view gets 503 with the configured Retry-After", () => {
    const gw = new EmulatedGateway({ startMs: START_MS, settings: { staleView: { maxAgeMs: 1_000, policy: "reject", retryAfterS: 7 } } });
    gw.publish(TWO_PODS);
    gw.host.advance(1_001);
    gw.host.tick();
    const reply = gw.request(post()).localResponse;
    expect(reply?.status).toBe(503);
    expect(reply?.headers).toContainEqual(["retry-after", "7"]);
  });
});
