// Discovery sources from the config (host/discovery/): IP literals as they
// are, DNS names as every address they resolve to, re-resolved; a pool's
// sources combined. Timers are faked, so re-resolution periods cost no time.
import { afterEach, describe, expect, it, vi } from "vitest";
import { parseGatewayConfig } from "../../host/config.js";
import { dnsSource, RESOLVE_EVERY_MS, RESOLVE_RETRY_MS, type Lookup } from "../../host/discovery/dns.js";
import { discoverySources } from "../../host/discovery/index.js";
import type { DiscoveryEventKind, DiscoverySink, DiscoverySource, Target } from "../../host/discovery/source.js";
import { staticSource } from "../../host/discovery/static.js";

/** A sink that keeps each pool's latest set and every event. */
function recordingSink() {
  const sets = new Map<string, Target[]>();
  const reports: Array<[string, string[]]> = [];
  const events: Array<[string, DiscoveryEventKind, string | undefined]> = [];
  const sink: DiscoverySink = {
    targets(pool, targets) {
      sets.set(pool, targets);
      reports.push([pool, targets.map((t) => t.address)]);
    },
    event: (pool, kind, detail) => events.push([pool, kind, detail]),
  };
  return { sink, sets, reports, events, addresses: (pool: string) => (sets.get(pool) ?? []).map((t) => t.address) };
}

/** A lookup whose answers the test sets, and that counts its calls. */
function fakeDns(initial: Record<string, string[] | Error>) {
  const answers = new Map(Object.entries(initial));
  const calls: string[] = [];
  const lookup: Lookup = async (host) => {
    calls.push(host);
    const a = answers.get(host);
    if (a === undefined) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: "ENOTFOUND" });
    if (a instanceof Error) throw a;
    return a.map((address) => ({ address, family: address.includes(":") ? 6 : 4 }));
  };
  return { lookup, calls, set: (host: string, a: string[] | Error) => answers.set(host, a) };
}

const sources: DiscoverySource[] = [];
afterEach(() => {
  for (const s of sources.splice(0)) s.close();
  vi.useRealTimers();
});
const track = <S extends DiscoverySource>(s: S) => (sources.push(s), s);

const ep = (host: string, port: number, capacity?: number) => ({ configured: `${host}:${port}`, host, port, capacity });

describe("static source", () => {
  it("reports the literals as they are, once, with their capacity hints and an added event each", async () => {
    const rec = recordingSink();
    await track(staticSource("p", [ep("10.0.0.1", 8000, 2), ep("::1", 8001, 1)])).start(rec.sink);
    expect(rec.sets.get("p")).toEqual([
      { ip: "10.0.0.1", port: 8000, address: "10.0.0.1:8000", name: "10.0.0.1:8000", hostHeader: "10.0.0.1:8000", capacity: 2 },
      { ip: "::1", port: 8001, address: "[::1]:8001", name: "::1:8001", hostHeader: "::1:8001", capacity: 1 },
    ]);
    expect(rec.events).toEqual([
      ["p", "added", "10.0.0.1:8000"],
      ["p", "added", "[::1]:8001"],
    ]);
  });
});

describe("DNS source", () => {
  it("makes a name with three addresses three targets, each with the name's Host header and capacity", async () => {
    const dns = fakeDns({ "vllm.test": ["10.0.0.3", "10.0.0.1", "10.0.0.2"] });
    const rec = recordingSink();
    await track(dnsSource("p", [ep("vllm.test", 8000, 3)], { lookup: dns.lookup, log: () => {} })).start(rec.sink);
    expect(rec.sets.get("p")).toEqual(
      ["10.0.0.1", "10.0.0.2", "10.0.0.3"].map((ip) => ({ ip, port: 8000, address: `${ip}:8000`, name: `vllm.test:8000@${ip}`, hostHeader: "vllm.test:8000", capacity: 3 })),
    );
    expect(rec.events.map((e) => e[1])).toEqual(["added", "added", "added"]);
  });

  it("takes the IPv4 addresses of a dual-stack name (the same pods twice otherwise), IPv6 when there is no IPv4", async () => {
    const dns = fakeDns({ dual: ["fd00::1", "10.0.0.1"], v6: ["fd00::2", "fd00::1"] });
    const rec = recordingSink();
    await track(dnsSource("p", [ep("dual", 80), ep("v6", 81)], { lookup: dns.lookup, log: () => {} })).start(rec.sink);
    expect(rec.addresses("p")).toEqual(["10.0.0.1:80", "[fd00::1]:81", "[fd00::2]:81"]);
  });

  it("follows changed answers at its period, reporting the whole set and what was added and removed", async () => {
    vi.useFakeTimers();
    const dns = fakeDns({ "vllm.test": ["10.0.0.1", "10.0.0.2", "10.0.0.3"] });
    const rec = recordingSink();
    await track(dnsSource("p", [ep("vllm.test", 8000)], { lookup: dns.lookup, log: () => {} })).start(rec.sink);
    dns.set("vllm.test", ["10.0.0.1", "10.0.0.3", "10.0.0.4"]);

    await vi.advanceTimersByTimeAsync(RESOLVE_EVERY_MS - 100);
    expect(rec.addresses("p")).toEqual(["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"]);
    await vi.advanceTimersByTimeAsync(200);
    expect(rec.addresses("p")).toEqual(["10.0.0.1:8000", "10.0.0.3:8000", "10.0.0.4:8000"]);
    expect(rec.events.slice(3)).toEqual([
      ["p", "removed", "10.0.0.2:8000"],
      ["p", "added", "10.0.0.4:8000"],
    ]);

    // The same answers again are no report.
    const reports = rec.reports.length;
    await vi.advanceTimersByTimeAsync(RESOLVE_EVERY_MS);
    expect(dns.calls).toHaveLength(3);
    expect(rec.reports).toHaveLength(reports);
  });

  it("retries an unresolved name every RESOLVE_RETRY_MS, reporting an empty set until it resolves", async () => {
    vi.useFakeTimers();
    const dns = fakeDns({});
    const rec = recordingSink();
    const logs: string[] = [];
    await track(dnsSource("p", [ep("late.test", 8000)], { lookup: dns.lookup, log: (l) => logs.push(l) })).start(rec.sink);
    expect(rec.sets.get("p")).toEqual([]);
    await vi.advanceTimersByTimeAsync(RESOLVE_RETRY_MS * 3);
    expect(dns.calls).toHaveLength(4);
    // The failure is an event and a log line once, not once per retry.
    expect(rec.events).toEqual([["p", "error", "getaddrinfo ENOTFOUND late.test"]]);
    expect(logs.filter((l) => l.includes("ENOTFOUND"))).toHaveLength(1);

    dns.set("late.test", ["10.0.0.9"]);
    await vi.advanceTimersByTimeAsync(RESOLVE_RETRY_MS);
    expect(rec.addresses("p")).toEqual(["10.0.0.9:8000"]);
    // Resolved: back to the long period.
    await vi.advanceTimersByTimeAsync(RESOLVE_RETRY_MS * 5);
    expect(dns.calls).toHaveLength(5);
  });

  it("keeps the last addresses when a lookup fails: the pods may well still be there", async () => {
    vi.useFakeTimers();
    const dns = fakeDns({ "vllm.test": ["10.0.0.1"] });
    const rec = recordingSink();
    await track(dnsSource("p", [ep("vllm.test", 8000)], { lookup: dns.lookup, log: () => {} })).start(rec.sink);
    dns.set("vllm.test", new Error("DNS server down"));
    await vi.advanceTimersByTimeAsync(RESOLVE_EVERY_MS);
    expect(rec.addresses("p")).toEqual(["10.0.0.1:8000"]);
    expect(rec.events.at(-1)).toEqual(["p", "error", "DNS server down"]);
    // Failing, it retries at the short period.
    const calls = dns.calls.length;
    await vi.advanceTimersByTimeAsync(RESOLVE_RETRY_MS);
    expect(dns.calls.length).toBe(calls + 1);
  });

  it("looks a name up again at once when one of its addresses stops answering, at most every RESOLVE_RETRY_MS", async () => {
    vi.useFakeTimers();
    const dns = fakeDns({ "vllm.test": ["10.0.0.1", "10.0.0.2"], "other.test": ["10.0.1.1"] });
    const rec = recordingSink();
    const source = track(dnsSource("p", [ep("vllm.test", 8000), ep("other.test", 8000)], { lookup: dns.lookup, log: () => {} }));
    await source.start(rec.sink);
    await vi.advanceTimersByTimeAsync(RESOLVE_RETRY_MS);
    dns.set("vllm.test", ["10.0.0.1", "10.0.0.7"]);

    source.notAnswering!("p", "10.0.0.2:8000");
    source.notAnswering!("other-pool", "10.0.0.2:8000");
    await vi.advanceTimersByTimeAsync(0);
    expect(rec.addresses("p")).toEqual(["10.0.0.1:8000", "10.0.0.7:8000", "10.0.1.1:8000"]);
    expect(dns.calls).toEqual(["vllm.test", "other.test", "vllm.test"]);

    source.notAnswering!("p", "10.0.0.7:8000");
    await vi.advanceTimersByTimeAsync(0);
    expect(dns.calls).toHaveLength(3); // too soon after the last lookup
  });
});

describe("discoverySources", () => {
  it("builds one source per pool; a pool of literals and names reports their union, capacities kept", async () => {
    const config = parseGatewayConfig(`
pools:
  - name: mixed
    baseModel: m
    endpoints: ["10.0.0.1:8000", { address: "vllm.test:8000", capacity: 2 }, "10.0.0.2:8000"]
  - { name: names, baseModel: n, endpoints: ["a.test:9000", "b.test:9000"] }
`);
    const dns = fakeDns({ "vllm.test": ["10.0.0.5", "10.0.0.2"], "a.test": ["10.0.1.1"], "b.test": ["10.0.1.1", "10.0.1.2"] });
    const built = discoverySources(config, { lookup: dns.lookup, log: () => {} });
    expect([...built.keys()]).toEqual(["mixed", "names"]);
    const rec = recordingSink();
    for (const s of built.values()) await track(s).start(rec.sink);

    // 10.0.0.2:8000 is both a literal and one of vllm.test's addresses: once, as the literal.
    expect(rec.sets.get("mixed")!.map((t) => [t.address, t.name, t.capacity])).toEqual([
      ["10.0.0.1:8000", "10.0.0.1:8000", 1],
      ["10.0.0.2:8000", "10.0.0.2:8000", 1],
      ["10.0.0.5:8000", "vllm.test:8000@10.0.0.5", 2],
    ]);
    expect(rec.addresses("names")).toEqual(["10.0.1.1:9000", "10.0.1.2:9000"]);
  });
});
