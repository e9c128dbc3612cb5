// Plugin configuration: a small JSON object in the Envoy config's
// `configuration` field, read with the same non-trapping scanner as bodies.
import { JsonScanner, JsonType } from "../core/json";

/** Collects top-level scalar members; unknown keys are reported, not fatal. */
class ConfigScanner extends JsonScanner {
  numbers: Map<string, f64> = new Map();
  strings: Map<string, string> = new Map();

  protected member(keyStart: i32, keyEnd: i32, type: JsonType, valueStart: i32, valueEnd: i32): void {
    const key = String.UTF8.decodeUnsafe(this.base + <usize>keyStart, <usize>(keyEnd - keyStart));
    if (type == JsonType.Number) this.numbers.set(key, this.numberAt(valueStart, valueEnd));
    else if (type == JsonType.String) this.strings.set(key, this.stringAt(valueStart, valueEnd));
  }

  numberOr(key: string, fallback: f64, min: f64, max: f64): f64 {
    if (!this.numbers.has(key)) return fallback;
    const v = this.numbers.get(key);
    if (v < min || v > max || isNaN(v)) {
      if (this.error.length == 0) this.error = key + " must be between " + min.toString() + " and " + max.toString();
      return fallback;
    }
    return v;
  }

  stringOr(key: string, fallback: string): string {
    return this.strings.has(key) ? this.strings.get(key) : fallback;
  }
}

export class FilterConfig {
  maxBodyBytes: i64 = 4 * 1024 * 1024;
  /** How often each worker checks shared data for a newer snapshot. */
  refreshMs: u32 = 20;
  error: string = "";

  /** An empty configuration means all defaults. */
  static parse(ptr: usize, len: i32): FilterConfig {
    const c = new FilterConfig();
    if (len == 0) return c;
    const s = new ConfigScanner();
    if (s.scanObject(ptr, len)) {
      c.maxBodyBytes = <i64>s.numberOr("max_body_bytes", <f64>c.maxBodyBytes, 1, <f64>(1 << 30));
      c.refreshMs = <u32>s.numberOr("refresh_ms", <f64>c.refreshMs, 1, 60_000);
    }
    c.error = s.error;
    return c;
  }
}

export class LinkConfig {
  aggregatorCluster: string = "llm_gateway_aggregator";
  reconnectMinMs: u64 = 100;
  reconnectMaxMs: u64 = 5_000;
  error: string = "";

  static parse(ptr: usize, len: i32): LinkConfig {
    const c = new LinkConfig();
    if (len == 0) return c;
    const s = new ConfigScanner();
    if (s.scanObject(ptr, len)) {
      c.aggregatorCluster = s.stringOr("aggregator_cluster", c.aggregatorCluster);
      c.reconnectMinMs = <u64>s.numberOr("reconnect_min_ms", <f64>c.reconnectMinMs, 10, 60_000);
      c.reconnectMaxMs = <u64>s.numberOr("reconnect_max_ms", <f64>c.reconnectMaxMs, 10, 600_000);
    }
    c.error = s.error;
    return c;
  }
}
