// The fake fleet's own file (testing/fakeserver/local-fleet.ts): pods for the
// pools of a gateway config, checked against it.
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { loadGatewayConfig, parseGatewayConfig } from "../../host/config.js";
import { FleetFileError, loadLocalFleet, parseLocalFleet } from "../../testing/fakeserver/index.js";

const config = (engine = "vllm") => parseGatewayConfig(`
pools:
  - name: llama
    baseModel: llama-3.1-8b
    engine: ${engine}
    endpoints: ["127.0.0.1:18001"]
`);

function issues(text: string, c = config()): string[] {
  try {
    parseLocalFleet(text, c, "fleet.yaml");
  } catch (err) {
    expect(err).toBeInstanceOf(FleetFileError);
    expect((err as Error).message).toMatch(/^fleet\.yaml: invalid fake fleet/);
    return (err as FleetFileError).issues;
  }
  throw new Error("expected the fleet to be refused");
}

describe("a local fake fleet", () => {
  it("loads config/local-fleet.yaml for config/local.yaml: 4 pods", () => {
    const local = loadGatewayConfig(fileURLToPath(new URL("../../config/local.yaml", import.meta.url)));
    const pods = loadLocalFleet(fileURLToPath(new URL("../../config/local-fleet.yaml", import.meta.url)), local);
    expect(pods.map((p) => [p.name, p.pool, p.port, p.speed, p.engine])).toEqual([
      ["llama-a", "llama", 18001, 1.0, "vllm"],
      ["llama-b", "llama", 18002, 0.5, "vllm"],
      ["qwen-a", "qwen", 18003, 1.0, "vllm"],
      ["qwen-b", "qwen", 18004, 1.0, "vllm"],
    ]);
  });

  it("gives a pod its pool's engine when it names none", () => {
    expect(parseLocalFleet("pods: [ { name: a, pool: llama, port: 18001 } ]", config("sglang"))).toEqual([
      { name: "a", pool: "llama", port: 18001, speed: 1, engine: "sglang", server: "fake" },
    ]);
  });

  it("runs real llama.cpp servers only for a pool that reads them as llamacpp", () => {
    const pod = "pods: [ { name: a, pool: llama, port: 18001, server: llama-server } ]";
    expect(parseLocalFleet(pod, config("llamacpp"))[0]).toMatchObject({ server: "llama-server", engine: "llamacpp" });
    expect(issues(pod)).toEqual(['pods[0].server: a llama-server pod needs its pool "llama" to read engine llamacpp (pools[0].engine is vllm)']);
    const local = loadGatewayConfig(fileURLToPath(new URL("../../config/llamacpp.yaml", import.meta.url)));
    const pods = loadLocalFleet(fileURLToPath(new URL("../../config/llamacpp-fleet.yaml", import.meta.url)), local);
    expect(pods.map((p) => p.server)).toEqual(["llama-server", "llama-server", "llama-server"]);
  });

  it("checks that pods name existing pools and their endpoints", () => {
    const fleet = (pods: string) => `pods:\n${pods}`;
    expect(issues(fleet("  - { name: a, pool: qwen, port: 18001 }\n"))).toEqual(['pods[0].pool: unknown pool "qwen" (pools: llama)']);
    expect(issues(fleet("  - { name: a, pool: llama, port: 18001 }\n  - { name: a, pool: llama, port: 18002, speed: 0 }\n"))).toEqual([
      "pods[1].speed: expected a number > 0",
    ]);
    expect(issues(fleet("  - { name: a, pool: llama, port: 18001 }\n  - { name: a, pool: llama, port: 18002 }\n"))).toEqual([
      'pods[1].name: duplicate pod name "a" (also pods[0])',
      'pods[1].port: no endpoint of pool "llama" (pools[0].endpoints) uses port 18002',
    ]);
    expect(issues("pods: [ { name: a, pool: llama, port: 18001, gpu: h100 } ]")).toEqual(['pods[0]: unknown field "gpu"']);
  });

  it("checks pods of a kubernetes pool against its port", () => {
    const kube = parseGatewayConfig(`pools:\n  - { name: llama, baseModel: llama-3.1-8b, kubernetes: { namespace: models, selector: "app=vllm", port: 8000 } }\n`);
    const fleet = (port: number) => `pods: [{ name: a, pool: llama, port: ${port} }]`;
    expect(parseLocalFleet(fleet(8000), kube)[0].port).toBe(8000);
    expect(issues(fleet(8001), kube)).toEqual(['pods[0].port: pool "llama" reaches its pods on port 8000 (pools[0].kubernetes.port), not 8001']);
  });
});
