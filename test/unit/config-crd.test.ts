// The InferenceGatewayConfig CRD is generated from the config schema: the
// committed deploy/kubernetes/base/crd.yaml must be what the schema renders
// now, and the rendered schema must be structural (what the API server
// accepts: every node typed or explicitly left unchecked, no $ref, no
// `additionalProperties: false`).
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { parseGatewayConfig } from "../../host/config.js";
import { projectRoot } from "../../host/paths.js";
import { specSchema, structural } from "../../host/kubernetes/crd.js";
import { configCrdYaml } from "../../host/kubernetes/crd-yaml.js";

type Node = Record<string, any>;

/** Paths of nodes a structural schema does not allow. */
function unstructural(node: Node, path = "spec"): string[] {
  const out: string[] = [];
  if (node.$ref || node.anyOf || node.oneOf || node.allOf) out.push(`${path}: has a combinator or $ref`);
  if (!node.type && !node["x-kubernetes-preserve-unknown-fields"]) out.push(`${path}: has no type`);
  if (node.additionalProperties === false) out.push(`${path}: additionalProperties false`);
  for (const [k, v] of Object.entries(node.properties ?? {})) out.push(...unstructural(v as Node, `${path}.${k}`));
  if (node.items) out.push(...unstructural(node.items, `${path}[]`));
  if (typeof node.additionalProperties === "object") out.push(...unstructural(node.additionalProperties, `${path}{}`));
  return out;
}

describe("the InferenceGatewayConfig CRD", () => {
  it("deploy/kubernetes/base/crd.yaml is current (else run `npm run gen:crd`)", () => {
    expect(readFileSync(join(projectRoot, "deploy/kubernetes/base/crd.yaml"), "utf8")).toBe(configCrdYaml());
  });

  it("has a structural schema that keeps the config's types, enums, ranges, patterns and defaults", () => {
    const spec = specSchema();
    expect(unstructural(spec)).toEqual([]);
    const pool = spec.properties.pools.items;
    expect(spec.required).toEqual(["pools"]);
    expect(pool.properties.engine).toMatchObject({ type: "string", enum: ["vllm", "sglang", "tgi", "llamacpp", "trtllm"], default: "vllm" });
    expect(spec.properties.aggregator.properties.port).toMatchObject({ type: "integer", minimum: 0, maximum: 65535, default: 50051 });
    expect(pool.properties.name.pattern).toBeTypeOf("string");
    // A union (a string or an object) is left to the aggregator's checks.
    expect(spec.properties.traffic.properties.tenant).toEqual({ "x-kubernetes-preserve-unknown-fields": true });
  });

  it("leaves what has no single type unchecked rather than guessing one", () => {
    expect(structural({ anyOf: [{ type: "string" }, { type: "object" }] })).toEqual({ "x-kubernetes-preserve-unknown-fields": true });
    expect(structural({})).toEqual({ "x-kubernetes-preserve-unknown-fields": true });
    expect(structural({ type: "object", additionalProperties: false })).toEqual({ type: "object", "x-kubernetes-preserve-unknown-fields": true });
  });
});

describe("the config file's apiVersion", () => {
  it("takes the resource's group/version as well as the file's own", () => {
    const text = (v: string) => `apiVersion: ${v}\nkind: InferenceGatewayConfig\npools: [{ name: a, baseModel: m, endpoints: ["127.0.0.1:1"] }]\n`;
    expect(parseGatewayConfig(text("llm-gateway/v1")).apiVersion).toBe("llm-gateway/v1");
    expect(parseGatewayConfig(text("llm-gateway.io/v1")).apiVersion).toBe("llm-gateway.io/v1");
  });
});

describe("a pool from an InferencePool", () => {
  const text = (pool: string) => `pools: [{ name: a, baseModel: m, ${pool} }]\n`;

  it("names the object, with no endpoints of its own", () => {
    const [pool] = parseGatewayConfig(text("inferencePool: { namespace: models, name: llama }")).pools;
    expect(pool.inferencePool).toEqual({ namespace: "models", name: "llama" });
    expect(pool.endpoints).toEqual([]);
  });

  it("takes its pods from one place only", () => {
    expect(() => parseGatewayConfig(text('endpoints: ["127.0.0.1:1"], inferencePool: { namespace: models, name: llama }'))).toThrow(
      "pools[0].inferencePool: a pool takes its pods from endpoints or from inferencePool, not both",
    );
  });
});
