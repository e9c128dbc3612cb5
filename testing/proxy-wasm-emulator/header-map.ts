// An HTTP header map as Envoy's host edits it for a plugin: keys are
// lower-cased (Http::LowerCaseString), repeated keys are kept in order,
// replace is HeaderMapImpl::setCopy (remove every entry, then append one) and
// remove drops every entry of the key.
import type { Pair } from "./pairs.js";

export class HeaderMap {
  private entries: [string, string][];

  constructor(pairs: Iterable<Pair> = []) {
    this.entries = [...pairs].map(([k, v]) => [k.toLowerCase(), v]);
  }

  pairs(): Pair[] {
    return this.entries.map(([k, v]) => [k, v] as const);
  }

  get size(): number {
    return this.entries.length;
  }

  /** The first value of `key`, as proxy_get_header_map_value reads it. */
  get(key: string): string | undefined {
    const k = key.toLowerCase();
    return this.entries.find(([name]) => name === k)?.[1];
  }

  replace(key: string, value: string): void {
    this.remove(key);
    this.entries.push([key.toLowerCase(), value]);
  }

  replaceAll(pairs: Iterable<Pair>): void {
    this.entries = [...pairs].map(([k, v]) => [k.toLowerCase(), v]);
  }

  remove(key: string): void {
    const k = key.toLowerCase();
    this.entries = this.entries.filter(([name]) => name !== k);
  }
}
