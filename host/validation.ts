// Shared pieces of the zod schemas for declarative files (the gateway config,
// benchmark scenarios): messages that name the offending field by its path.
import { parse as parseYaml } from "yaml";
import type * as z from "zod";

/** A schema-level message; "is required" wins for a missing field. */
export const msg = (text: string) => (iss: { code: string; input?: unknown }) =>
  iss.code === "invalid_type" && iss.input === undefined ? "is required" : text;

/** `pools[1].weights.queue` style path. */
export function formatPath(path: readonly PropertyKey[]): string {
  let out = "";
  for (const key of path) out += typeof key === "number" ? `[${key}]` : out ? `.${String(key)}` : String(key);
  return out || "<root>";
}

/** Fallback messages for issues a schema does not word itself. */
export function errorMap(iss: { code: string; input?: unknown; keys?: string[]; expected?: string }): string | undefined {
  if (iss.code === "unrecognized_keys") {
    const keys = iss.keys ?? [];
    return `unknown field${keys.length > 1 ? "s" : ""} ${keys.map((k) => JSON.stringify(k)).join(", ")}`;
  }
  if (iss.code === "invalid_type") return iss.input === undefined ? "is required" : `expected ${iss.expected === "object" ? "a mapping" : iss.expected}`;
  return undefined;
}

/** One `path: message` line per issue. */
export function issueLines(error: z.ZodError): string[] {
  return error.issues.map((iss) => `${formatPath(iss.path)}: ${iss.message}`);
}

/**
 * Parses YAML text and validates it with `schema`, then with `crossCheck`
 * (rules that need the whole document): the data, or every problem found.
 */
export function validateYaml<S extends z.ZodType>(
  schema: S,
  text: string,
  crossCheck: (data: z.output<S>) => string[],
): { data: z.output<S> } | { issues: string[] } {
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (err) {
    return { issues: [`YAML syntax error: ${(err as Error).message}`] };
  }
  const result = schema.safeParse(doc ?? {}, { error: errorMap });
  if (!result.success) return { issues: issueLines(result.error) };
  const issues = crossCheck(result.data);
  return issues.length > 0 ? { issues } : { data: result.data };
}
