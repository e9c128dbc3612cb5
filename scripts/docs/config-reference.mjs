#!/usr/bin/env node
// Renders docs/configuration-reference.md's generated part from the built
// config module (dist/host/config.js), so the reference cannot drift from the
// schema that validates the file: field names, types, limits and defaults come
// from zod's JSON Schema of `configSchema`, the profiles' numbers from
// BUILTIN_PROFILES, batch slots from DEFAULT_BATCH_SLOTS. Only the text
// between the markers is generated; the hand-written notes around it stay.
// `npm run docs` rewrites the file; test/tools/docs.test.ts fails when it is stale.
import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath, pathToFileURL } from "node:url";
import { z } from "zod";

const root = fileURLToPath(new URL("../../", import.meta.url));
export const REFERENCE_PATH = `${root}docs/configuration-reference.md`;
export const BEGIN = "<!-- BEGIN GENERATED: npm run docs (scripts/docs/config-reference.mjs); do not edit by hand -->";
export const END = "<!-- END GENERATED -->";

// Zod's stand-in for "no upper bound" on integers; printing it would be noise.
const MAX_SAFE = Number.MAX_SAFE_INTEGER;

const code = (v) => "`" + (typeof v === "string" ? v : JSON.stringify(v)) + "`";

function typeOf(s) {
  if (s.const !== undefined) return code(s.const);
  if (s.enum) return s.enum.map(code).join(" \\| ");
  if (s.anyOf) return s.anyOf.map(typeOf).join(" or ");
  if (s.type === "array") return `list of ${s.items ? typeOf(s.items) : "values"}`;
  if (s.type === "object" && s.additionalProperties && typeof s.additionalProperties === "object") return "mapping";
  // Refined or transformed fields (selectors, endpoint objects' members) have no JSON Schema type.
  return s.type ?? "see notes";
}

function limitsOf(s) {
  const parts = [];
  if (s.minimum !== undefined && s.maximum !== undefined && s.maximum !== MAX_SAFE) parts.push(`${s.minimum}..${s.maximum}`);
  else if (s.minimum !== undefined) parts.push(`>= ${s.minimum}`);
  else if (s.maximum !== undefined && s.maximum !== MAX_SAFE) parts.push(`<= ${s.maximum}`);
  if (s.exclusiveMinimum !== undefined) parts.push(`> ${s.exclusiveMinimum}`);
  if (s.minItems !== undefined) parts.push(`at least ${s.minItems}`);
  if (s.minLength !== undefined) parts.push("non-empty");
  if (s.pattern !== undefined) parts.push(code(s.pattern));
  return parts.join(", ");
}

const isObject = (s) => s.type === "object" && s.properties;

// Defaults set by a transform rather than `.default()`, which JSON Schema cannot carry.
const COMPUTED_DEFAULTS = { "pools[].batchSlots": "by `engine` (table below)" };

/** The value at a dotted path of the parsed minimal config, for fields outside lists. */
const parsedAt = (parsed, path) => (path.includes("[]") ? undefined : path.split(".").reduce((o, k) => o?.[k], parsed));

/** One row per leaf field, depth first, in the schema's order. */
function rows(schema, path, required, out, parsed) {
  for (const [key, s] of Object.entries(schema.properties)) {
    const here = path ? `${path}.${key}` : key;
    const req = required.includes(key) ? "yes" : "";
    let dflt = s.default === undefined || (isObject(s) && JSON.stringify(s.default) === "{}") ? "" : code(s.default);
    // zod's JSON Schema drops a union's default; the parser still applies it.
    if (!dflt && s.anyOf && parsedAt(parsed, here) !== undefined) dflt = code(parsedAt(parsed, here));
    if (COMPUTED_DEFAULTS[here]) dflt = COMPUTED_DEFAULTS[here];
    if (isObject(s)) {
      out.push([here, "object", req, dflt, ""]);
      rows(s, here, s.required ?? [], out, parsed);
    } else if (s.type === "array" && s.items && isObject(s.items)) {
      out.push([here, "list", req, dflt, limitsOf(s)]);
      rows(s.items, `${here}[]`, s.items.required ?? [], out, parsed);
    } else if (s.type === "object" && isObject(s.additionalProperties ?? {})) {
      out.push([here, "mapping of name → object", req, dflt, ""]);
      rows(s.additionalProperties, `${here}.<name>`, s.additionalProperties.required ?? [], out, parsed);
    } else {
      out.push([here, typeOf(s), req, dflt, limitsOf(s)]);
    }
  }
  return out;
}

const table = (head, body) =>
  [`| ${head.join(" | ")} |`, `|${head.map(() => "---").join("|")}|`, ...body.map((r) => `| ${r.join(" | ")} |`)].join("\n");

/** Dotted leaves of a plain object: [["admission.maxWaiting", 2], ...]. */
function leaves(obj, prefix = "") {
  return Object.entries(obj).flatMap(([k, v]) =>
    v !== null && typeof v === "object" && !Array.isArray(v) ? leaves(v, `${prefix}${k}.`) : [[`${prefix}${k}`, v]],
  );
}

/** The generated part, markers included. */
export async function render() {
  const config = await import(pathToFileURL(`${root}dist/host/config.js`).href);
  const { SCORERS } = await import(pathToFileURL(`${root}dist/host/scorers.generated.js`).href);
  const schema = z.toJSONSchema(config.configSchema, { io: "input", unrepresentable: "any" });
  // The smallest valid file, parsed: what the parser fills in where the file is silent.
  const parsed = config.parseGatewayConfig('pools: [{ name: p, baseModel: m, endpoints: ["127.0.0.1:8000"] }]');
  const fields = rows(schema, "", schema.required ?? [], [], parsed).map(([p, t, r, d, l]) => [code(p), t, r, d, l]);

  const names = Object.keys(config.BUILTIN_PROFILES);
  const profileRows = leaves(config.BUILTIN_PROFILES[names[0]]).map(([key]) => [
    code(key),
    ...names.map((n) => code(leaves(config.BUILTIN_PROFILES[n]).find(([k]) => k === key)[1])),
  ]);

  return [
    BEGIN,
    "",
    "### Fields",
    "",
    "Every field the file may have, from the schema in `host/config.ts`. `[]` marks a",
    "list's items, `<name>` a mapping's keys. An empty default means the field is",
    "optional with no value, or required (see the column), or an object whose own",
    "fields carry the defaults.",
    "",
    table(["field", "type", "required", "default", "limits"], fields),
    "",
    "### Scorers",
    "",
    "The keys of every `weights` mapping, in the order the picker sums them, from each",
    "scorer's folder (`assembly/core/scorers/<scorer>/scorer.json`).",
    "",
    table(
      ["scorer", "what it scores", "reads", "latency", "throughput"],
      SCORERS.map((s) => [code(s.name), s.summary, s.consumes.join(", "), code(s.defaultWeight.latency), code(s.defaultWeight.throughput)]),
    ),
    "",
    "### Built-in profiles (`BUILTIN_PROFILES`)",
    "",
    table(["field", ...names.map(code)], profileRows),
    "",
    "### `pools[].batchSlots` by engine (`DEFAULT_BATCH_SLOTS`)",
    "",
    table(["engine", "batchSlots"], Object.entries(config.DEFAULT_BATCH_SLOTS).map(([e, n]) => [code(e), code(n)])),
    "",
    `Engines: ${config.ENGINES.map(code).join(", ")}. Priorities: ${config.PRIORITIES.map(code).join(", ")}.`,
    "",
    END,
  ].join("\n");
}

/** The file's text with its generated part replaced by `generated`. */
export function splice(text, generated) {
  const a = text.indexOf(BEGIN);
  const b = text.indexOf(END);
  if (a < 0 || b < a) throw new Error(`${REFERENCE_PATH}: markers not found`);
  return text.slice(0, a) + generated + text.slice(b + END.length);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const text = readFileSync(REFERENCE_PATH, "utf8");
  writeFileSync(REFERENCE_PATH, splice(text, await render()));
  console.log(`wrote ${REFERENCE_PATH}`);
}
