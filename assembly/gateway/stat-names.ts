// How the filter names its Envoy stats so that Prometheus sees labels.
//
// A stat is `llm_gateway.<metric>` followed by `;<tag>=<value>` per label,
// e.g. `llm_gateway.pod_picks_total;pool=llama;model_server=10.0.0.7:8000`. Envoy prefixes
// it with `wasmcustom.`; the bootstrap's stats_config.stats_tags (one regex
// per tag name in envoy/gateway.yaml) cut each `;<tag>=<value>` out of the
// name and make it a tag, and /stats/prometheus shows
// `llm_gateway_pod_picks_total{pool="llama",model_server="10.0.0.7:8000"}`.
//
// Why `;` and `=`: values keep their dots and colons (pod addresses, model
// names like `meta-llama/Llama-3.1-8B`), which a dot-separated scheme would
// have to mangle, and neither character can occur in a value: pool and model
// names are [A-Za-z0-9._:/-] (host/config.ts), addresses add `[` and `]`,
// bucket bounds `+` (`le=+Inf`), and tagValue() replaces anything else by
// `_`, so a regex can always find where a value ends.
//
// Names follow Prometheus' conventions: counters end in `_total`, durations
// are in seconds, and no label is one Prometheus' Kubernetes service
// discovery attaches to a target (pod, namespace, service, endpoint,
// container, instance, job), which would turn ours into `exported_*`: a
// pod's address is `model_server`.

export const PREFIX = "llm_gateway.";

/** `llm_gateway.<metric>` and a `;<tag>=<value>` for each (tag, value) pair in `tags`. */
export function statName(metric: string, tags: string[] = []): string {
  let out = PREFIX + metric;
  for (let i = 0; i + 1 < tags.length; i += 2) out += ";" + tags[i] + "=" + tagValue(tags[i + 1]);
  return out;
}

/** A label value: letters, digits and `. _ : / - [ ] +` kept, anything else `_`; never empty. */
export function tagValue(s: string): string {
  if (s.length == 0) return "_";
  let out = "";
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    const ok = (c >= 0x30 && c <= 0x39) || ((c | 0x20) >= 0x61 && (c | 0x20) <= 0x7a) ||
      c == 0x2e || c == 0x5f || c == 0x3a || c == 0x2f || c == 0x2d || c == 0x5b || c == 0x5d || c == 0x2b;
    out += ok ? String.fromCharCode(c) : "_";
  }
  return out;
}
