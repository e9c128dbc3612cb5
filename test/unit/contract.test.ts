// proto/contract.json is the one source of the header names, priority codes
// and limits; the filter compiles in a module generated from it, which must
// not fall behind it.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { contractPath, generate, generatedPath } from "../../scripts/gen-contract.mjs";
import { CONTRACT } from "../../host/contract.js";

describe("the gateway contract", () => {
  it("has its AssemblyScript module generated from the current proto/contract.json", () => {
    const want = generate(JSON.parse(readFileSync(contractPath, "utf8")));
    expect(readFileSync(generatedPath, "utf8"), "assembly/core/wire/contract.generated.ts is stale: run npm run build:wasm").toBe(want);
  });

  it("names only headers under the gateway's prefix, besides the client's x-llm-* requests", () => {
    for (const [key, name] of Object.entries(CONTRACT.headers)) {
      const clientSent = key === "priority" || key === "debug";
      expect(name.startsWith(CONTRACT.gatewayHeaderPrefix), `${key}: ${name}`).toBe(!clientSent);
    }
  });
});
