// Plugin configuration: a small JSON object in the Envoy config's
// `configuration` field, read with the same non-trapping scanner as bodies.
import { MAX_BODY_BYTES } from "../core/wire/contract.generated";
import { JsonScanner, JsonType } from "../core/openai/json";
import { HealthRules } from "../core/fleet/health";
import { Gate, TenantFrom } from "../core/openai/trust";
import { StaleViewPolicy, ViewPolicy } from "../core/fleet/view";

/**
 * Collects top-level scalar members. An unknown key is an error: a typo in a
 * setting must not silently leave a default in force.
 */
class ConfigScanner extends JsonScanner {
  numbers: Map<string, f64> = new Map();
  strings: Map<string, string> = new Map();
  private keys: string[] = [];

  onlyKeys(allowed: string[]): void {
    for (let i = 0; i < this.keys.length; i++) {
      if (!allowed.includes(this.keys[i]) && this.error.length == 0) this.error = "unknown setting '" + this.keys[i] + "'";
    }
  }

  protected member(keyStart: i32, keyEnd: i32, type: JsonType, valueStart: i32, valueEnd: i32): void {
    const key = String.UTF8.decodeUnsafe(this.base + <usize>keyStart, <usize>(keyEnd - keyStart));
    this.keys.push(key);
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

  /** One of `choices` (returns its index), or `fallback` if the key is absent. */
  choiceOr(key: string, choices: string[], fallback: i32): i32 {
    if (!this.strings.has(key)) return fallback;
    const i = choices.indexOf(this.strings.get(key));
    if (i < 0 && this.error.length == 0) this.error = key + " must be one of " + choices.join(", ");
    return i < 0 ? fallback : i;
  }
}


export class FilterConfig {
  maxBodyBytes: i64 = 4 * 1024 * 1024;
  /** Who may ask for the Critical class; with Claim, a JWT claim value in `criticalClaims`. */
  criticalFrom: Gate = Gate.Nobody;
  criticalClaims: string[] = [];
  /** Nobody: no decision header; Anyone: on every response; Claim: when asked by a client whose claim allows it. */
  debug: Gate = Gate.Nobody;
  debugClaims: string[] = [];
  tenantFrom: TenantFrom = TenantFrom.Nobody;
  /** Leave each answer's token counts in the stream's filter state, for Envoy's access log ("usage_to_filter_state": "on"). */
  usageToFilterState: bool = false;
  /**
   * What one worker may hold while pools have no room: bodies stay in
   * Envoy's buffers, so these bound the memory held requests take (64 MiB is
   * 16,000 chat requests of 4 KiB, or 64 one-MiB long-context prompts).
   */
  maxQueuedBytes: i64 = 64 * 1024 * 1024;
  maxQueuedRequests: i32 = 4096;
  /** How often each worker checks shared data for a newer snapshot (and releases held requests). */
  refreshMs: u32 = 20;
  view: ViewPolicy = new ViewPolicy();
  health: HealthRules = new HealthRules();
  /** Empty when valid; the filter then refuses its configuration (Envoy rejects it). */
  error: string = "";

  /** An empty configuration means all defaults. */
  static parse(ptr: usize, len: i32): FilterConfig {
    const c = new FilterConfig();
    if (len == 0) return c;
    const s = new ConfigScanner();
    if (s.scanObject(ptr, len)) {
      c.maxBodyBytes = <i64>s.numberOr("max_body_bytes", <f64>c.maxBodyBytes, 1, <f64>MAX_BODY_BYTES);
      c.refreshMs = <u32>s.numberOr("refresh_ms", <f64>c.refreshMs, 1, 60_000);
      c.view.maxAgeMs = <u64>s.numberOr("max_view_age_ms", <f64>c.view.maxAgeMs, 1, 86_400_000);
      c.view.stalePolicy = <StaleViewPolicy>s.choiceOr("stale_view_policy", ["fail_open", "reject"], c.view.stalePolicy);
      c.view.retryAfterS = <u32>s.numberOr("retry_after_s", <f64>c.view.retryAfterS, 1, 86_400);
      c.health.threshold = <u32>s.numberOr("eject_after_failures", <f64>c.health.threshold, 1, 1_000_000);
      c.health.ejectMs = <u64>s.numberOr("eject_ms", <f64>c.health.ejectMs, 1, 86_400_000);
      c.health.saturatedBackoffMs = <u64>s.numberOr("saturated_backoff_ms", <f64>c.health.saturatedBackoffMs, 1, 86_400_000);
      c.criticalFrom = <Gate>s.choiceOr("critical_from", ["none", "any", "claim"], c.criticalFrom);
      c.criticalClaims = claimValues(s.stringOr("critical_claim_values", ""));
      c.debug = <Gate>s.choiceOr("debug", ["off", "all", "claim"], c.debug);
      c.debugClaims = claimValues(s.stringOr("debug_claim_values", ""));
      c.tenantFrom = <TenantFrom>s.choiceOr("tenant_from", ["none", "header", "claim"], c.tenantFrom);
      c.maxQueuedBytes = <i64>s.numberOr("max_queued_bytes", <f64>c.maxQueuedBytes, 0, 1099511627776);
      c.maxQueuedRequests = <i32>s.numberOr("max_queued_requests", <f64>c.maxQueuedRequests, 0, 1_000_000);
      c.usageToFilterState = s.choiceOr("usage_to_filter_state", ["off", "on"], 0) == 1;
      s.onlyKeys(["max_body_bytes", "refresh_ms", "max_view_age_ms", "stale_view_policy", "retry_after_s",
        "eject_after_failures", "eject_ms", "saturated_backoff_ms", "critical_from", "critical_claim_values", "debug", "debug_claim_values",
        "tenant_from", "max_queued_bytes", "max_queued_requests", "usage_to_filter_state"]);
      // A claim gate with no value to match would silently admit nobody: say so instead.
      if (s.error.length == 0 && c.criticalFrom == Gate.Claim && c.criticalClaims.length == 0) s.error = "critical_claim_values must list the claim values that may claim Critical";
      if (s.error.length == 0 && c.debug == Gate.Claim && c.debugClaims.length == 0) s.error = "debug_claim_values must list the claim values that may ask for decisions";
    }
    c.error = s.error;
    return c;
  }
}

/** "a,b" as ["a", "b"], empty items dropped. */
function claimValues(list: string): string[] {
  const out: string[] = [];
  const parts = list.split(",");
  for (let i = 0; i < parts.length; i++) {
    const v = parts[i].trim();
    if (v.length > 0) out.push(v);
  }
  return out;
}

export class LinkConfig {
  aggregatorCluster: string = "llm_gateway_aggregator";
  reconnectMinMs: u64 = 100;
  reconnectMaxMs: u64 = 5_000;
  /** How often the link reports this Envoy's in flight to the aggregator for its replicas (0: it shares nothing). */
  shareIntervalMs: u64 = 20;
  error: string = "";

  static parse(ptr: usize, len: i32): LinkConfig {
    const c = new LinkConfig();
    if (len == 0) return c;
    const s = new ConfigScanner();
    if (s.scanObject(ptr, len)) {
      c.aggregatorCluster = s.stringOr("aggregator_cluster", c.aggregatorCluster);
      c.reconnectMinMs = <u64>s.numberOr("reconnect_min_ms", <f64>c.reconnectMinMs, 10, 60_000);
      c.reconnectMaxMs = <u64>s.numberOr("reconnect_max_ms", <f64>c.reconnectMaxMs, 10, 600_000);
      c.shareIntervalMs = <u64>s.numberOr("share_interval_ms", <f64>c.shareIntervalMs, 0, 60_000);
      s.onlyKeys(["aggregator_cluster", "reconnect_min_ms", "reconnect_max_ms", "share_interval_ms"]);
    }
    c.error = s.error;
    return c;
  }
}
