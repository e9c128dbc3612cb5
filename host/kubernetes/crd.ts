// The InferenceGatewayConfig CustomResourceDefinition, its OpenAPI schema
// derived from the config's zod schema (host/config.ts), so the API server
// refuses a wrong type, enum, range or pattern before the aggregator sees it.
// The API server wants a structural schema: every node typed, no $ref, no
// `additionalProperties: false` (it prunes unknown fields instead). The few
// unions (a string or an object) and fields checked by a refinement have no
// single type: those nodes keep their content unchecked by the API server
// (x-kubernetes-preserve-unknown-fields) and the aggregator checks them,
// reporting a refusal in the object's status.
import { z } from "zod";
import { configSchema } from "../config.js";

export const CONFIG_GROUP = "llm-gateway.io";
export const CONFIG_VERSION = "v1";
export const CONFIG_KIND = "InferenceGatewayConfig";
export const CONFIG_PLURAL = "inferencegatewayconfigs";

type Schema = Record<string, unknown>;

const UNCHECKED: Schema = { "x-kubernetes-preserve-unknown-fields": true };

/** Keywords the API server's JSONSchemaProps knows and a structural schema may hold. */
const KEPT = ["type", "description", "default", "enum", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "pattern", "minItems", "maxItems", "required"];

/** One JSON Schema node (zod's output) as a structural schema node. */
export function structural(node: Schema): Schema {
  if (node.anyOf || node.oneOf || node.allOf || node.not || typeof node.type !== "string") return { ...UNCHECKED, ...pick(node, ["description"]) };
  const out = pick(node, KEPT);
  if (node.type === "object") {
    const props = node.properties as Record<string, Schema> | undefined;
    const extra = node.additionalProperties;
    if (props) out.properties = Object.fromEntries(Object.entries(props).map(([k, v]) => [k, structural(v)]));
    else if (extra && typeof extra === "object") out.additionalProperties = structural(extra as Schema);
    else out["x-kubernetes-preserve-unknown-fields"] = true;
  }
  if (node.type === "array") out.items = node.items && typeof node.items === "object" ? structural(node.items as Schema) : UNCHECKED;
  return out;
}

function pick(node: Schema, keys: string[]): Schema {
  return Object.fromEntries(keys.filter((k) => node[k] !== undefined).map((k) => [k, node[k]]));
}

/** The schema of the resource's spec: the config file's content without apiVersion and kind. */
export function specSchema(): Schema {
  const json = z.toJSONSchema(configSchema.omit({ apiVersion: true, kind: true }), { io: "input", unrepresentable: "any", target: "openapi-3.0" }) as Schema;
  delete json.$schema;
  return structural(json);
}

const condition = {
  type: "object",
  required: ["type", "status"],
  properties: {
    type: { type: "string" },
    status: { type: "string", enum: ["True", "False", "Unknown"] },
    reason: { type: "string" },
    message: { type: "string" },
    observedGeneration: { type: "integer", format: "int64", minimum: 0 },
    lastTransitionTime: { type: "string", format: "date-time" },
  },
};

/** The whole CustomResourceDefinition, as deploy/kubernetes/base/crd.yaml holds it. */
export function configCrd(): Schema {
  return {
    apiVersion: "apiextensions.k8s.io/v1",
    kind: "CustomResourceDefinition",
    metadata: { name: `${CONFIG_PLURAL}.${CONFIG_GROUP}`, labels: { "app.kubernetes.io/name": "llm-gateway" } },
    spec: {
      group: CONFIG_GROUP,
      scope: "Namespaced",
      names: { kind: CONFIG_KIND, plural: CONFIG_PLURAL, singular: "inferencegatewayconfig", listKind: `${CONFIG_KIND}List`, shortNames: ["igc"] },
      versions: [
        {
          name: CONFIG_VERSION,
          served: true,
          storage: true,
          subresources: { status: {} },
          additionalPrinterColumns: [
            { name: "Accepted", type: "string", jsonPath: '.status.conditions[?(@.type=="Accepted")].status' },
            { name: "Reason", type: "string", jsonPath: '.status.conditions[?(@.type=="Accepted")].reason' },
            { name: "Message", type: "string", jsonPath: '.status.conditions[?(@.type=="Accepted")].message', priority: 1 },
            { name: "Age", type: "date", jsonPath: ".metadata.creationTimestamp" },
          ],
          schema: {
            openAPIV3Schema: {
              type: "object",
              required: ["spec"],
              properties: {
                apiVersion: { type: "string" },
                kind: { type: "string" },
                metadata: { type: "object" },
                spec: specSchema(),
                status: {
                  type: "object",
                  properties: {
                    observedGeneration: { type: "integer", format: "int64", minimum: 0 },
                    conditions: { type: "array", items: condition, "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"] },
                  },
                },
              },
            },
          },
        },
      ],
    },
  };
}
