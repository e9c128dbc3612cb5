// The snapshot link's settings (Envoy's bootstrap extension running the
// filter's singleton service, assembly/gateway/config.ts LinkConfig): a JSON
// string in the template, which the renderer's parts amend field by field.
import { isMap, type Document } from "yaml";

/** Sets `settings` in the link's JSON configuration, keeping its other fields. */
export function withLinkSettings(doc: Document, settings: Record<string, unknown>): void {
  const link = doc.getIn(["bootstrap_extensions", 0, "typed_config", "config", "configuration"]);
  if (!isMap(link)) throw new Error("the Envoy template has no link configuration");
  const current = JSON.parse(String(link.get("value"))) as Record<string, unknown>;
  link.set("value", JSON.stringify({ ...current, ...settings }));
}
