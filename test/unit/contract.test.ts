// proto/contract.json is the one source of the header names, priority codes
// and limits; the filter compiles in a module generated from it, which must
// not fall behind it.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { contractPath, generate, generatedPath, generateScorers, readScorers, scorersGeneratedPath } from "../../scripts/gen-contract.mjs";
import { CONTRACT } from "../../host/contract.js";

describe("the gateway contract", () => {
  it("has its AssemblyScript module generated from the current proto/contract.json", () => {
    const want = generate(JSON.parse(readFileSync(contractPath, "utf8")));
    expect(readFileSync(generatedPath, "utf8"), "assembly/core/wire/contract.generated.ts is stale: run npm run build:wasm").toBe(want);
  });

  it("has host/scorers.generated.ts generated from the scorers' folders, in registry.ts's order", () => {
    const scorers = readScorers();
    expect(scorers.map((s) => s.name)).toEqual(["queue", "kvCache", "running", "lora", "prefix"]);
    expect(readFileSync(scorersGeneratedPath, "utf8"), "host/scorers.generated.ts is stale: run npm run build:wasm").toBe(generateScorers(scorers));
  });

  it("refuses a scorer folder the registry does not list, and a scorer.json whose name its code does not use", () => {
    const dir = mkdtempSync(join(tmpdir(), "scorers-"));
    try {
      mkdirSync(join(dir, "queue"));
      writeFileSync(join(dir, "queue", "scorer.json"), JSON.stringify({ name: "queue", summary: "", consumes: [], defaultWeight: { latency: 1, throughput: 1 } }));
      writeFileSync(join(dir, "queue", "queue.ts"), 'export class QueueScorer { constructor() { super("queue"); } }');
      writeFileSync(join(dir, "registry.ts"), 'import { QueueScorer } from "./queue/queue";\n  return [\n    new QueueScorer(),\n  ];\n');
      expect(readScorers(dir).map((s) => s.name)).toEqual(["queue"]);
      mkdirSync(join(dir, "ttft"));
      expect(() => readScorers(dir)).toThrow("scorer folders not in registry.ts: ttft");
      writeFileSync(join(dir, "queue", "queue.ts"), 'export class QueueScorer { constructor() { super("wait"); } }');
      rmSync(join(dir, "ttft"), { recursive: true });
      expect(() => readScorers(dir)).toThrow('queue/scorer.json names "queue", its code does not');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("names only headers under the gateway's prefix, besides the client's x-llm-* requests", () => {
    for (const [key, name] of Object.entries(CONTRACT.headers)) {
      const clientSent = key === "priority" || key === "debug" || key === "tenant" || key === "maxWait";
      expect(name.startsWith(CONTRACT.gatewayHeaderPrefix), `${key}: ${name}`).toBe(!clientSent);
    }
  });
});
