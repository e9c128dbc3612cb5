// The filter runs on AssemblyScript's minimal runtime, which collects only
// when assembly/abi/collector.ts says so, between the host's calls. Without
// those collections every snapshot the link decodes, and every request's
// stream context, would stay in linear memory for good; with them the heap
// stops growing once it holds what is live plus a second's garbage.
import { describe, expect, it } from "vitest";
import { endpoint, pool, snapshot } from "../../testing/fixtures/snapshot-builders.js";
import { EmulatedGateway } from "../helpers/emulated-gateway.js";

const START_MS = 1_750_000_000_000;
const PODS = 1000;
const body = '{"model":"llama","messages":[{"role":"user","content":"hi"}]}';

function fleet(round: number) {
  // Each round's pods differ in their figures, so every publish decodes a new snapshot.
  return snapshot([pool("p", "llama", Array.from({ length: PODS }, (_, i) =>
    endpoint(`10.0.${i >> 8}.${i & 255}:8000`, { waiting: (i + round) % 7 })))]);
}

describe("garbage collection on the minimal runtime", () => {
  it("memory stops growing while snapshots are replaced and requests come and go", () => {
    const gateway = new EmulatedGateway({ startMs: START_MS });
    const pages = () => (gateway.workers[0].vm.exports.memory as unknown as WebAssembly.Memory).buffer.byteLength / 65536;
    const linkPages = () => (gateway.link.vm.exports.memory as unknown as WebAssembly.Memory).buffer.byteLength / 65536;
    const round = (r: number) => {
      gateway.publish(fleet(r));
      for (let t = 0; t < 10; t++) gateway.host.tick();
      for (let i = 0; i < 20; i++) {
        const stream = gateway.request({ headers: { ":method": "POST", ":path": "/v1/chat/completions", "content-length": String(body.length) }, body });
        const primary = stream.requestHeaders.get("x-gateway-destination-endpoint");
        expect(primary, JSON.stringify(stream.localResponse)).toBeTruthy();
        stream.respond(['{"id":"c","object":"chat.completion","choices":[]}']);
        stream.finish({ responseCode: 200, upstreamAddress: primary!.split(",")[0] });
      }
    };
    for (let r = 0; r < 30; r++) round(r);
    const warm = { worker: pages(), link: linkPages() };
    for (let r = 30; r < 150; r++) round(r);
    // 120 more snapshots of 1000 pods: without collections each would keep its few hundred KiB.
    expect(pages()).toBe(warm.worker);
    expect(linkPages()).toBe(warm.link);
  }, 120_000);
});
