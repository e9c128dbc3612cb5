// What the replica launcher and the live bench's --envoys decide before
// anything starts: which aggregators to run (the config's peers, refused
// naming the field when they do not match), each Envoy's ports, the front's
// retries and checks, and the comparison against one Envoy.
import { describe, expect, it } from "vitest";
import { parse as parseYaml, stringify } from "yaml";
import { parse } from "../../bench/cli.js";
import { envoysRows } from "../../bench/live/replicas.js";
import type { PolicyResult } from "../../bench/types.js";
import { join } from "node:path";
import { ConfigError, loadGatewayConfig, parseGatewayConfig } from "../../host/config.js";
import { projectRoot } from "../../host/paths.js";
import { loadLocalFleet } from "../../testing/fakeserver/index.js";
import { renderFrontBootstrap } from "../../testing/launcher/front.js";
import { aggregatorPeers, replicaPortClaims } from "../../testing/launcher/replicas.js";

const config = (aggregator: Record<string, unknown> = {}) =>
  parseGatewayConfig(
    stringify({
      gateway: { host: "127.0.0.1", port: 8080, adminPort: 9901 },
      aggregator: { host: "127.0.0.1", port: 50051, ...aggregator },
      pools: [{ name: "llama", baseModel: "llama-3.1-8b", endpoints: ["127.0.0.1:18001"] }],
    }),
    "test.yaml",
  );

const issues = (f: () => unknown): string[] => {
  try {
    f();
  } catch (err) {
    if (err instanceof ConfigError) return err.issues;
    throw err;
  }
  throw new Error("no ConfigError");
};

describe("replica launcher", () => {
  it("runs the config's peers as the aggregators, and refuses a count or a peer that does not fit", () => {
    expect(aggregatorPeers(config(), 1)).toEqual(["127.0.0.1:50051"]);
    const two = config({ leaderElection: { peers: ["127.0.0.1:50051", "127.0.0.1:50052"] } });
    expect(aggregatorPeers(two, 2)).toEqual(["127.0.0.1:50051", "127.0.0.1:50052"]);
    expect(issues(() => aggregatorPeers(config(), 2))[0]).toMatch(/^aggregator\.leaderElection\.peers: 2 aggregators need/);
    expect(issues(() => aggregatorPeers(two, 3))[0]).toBe("aggregator.leaderElection.peers lists 2 aggregators, --aggregators asks for 3");
    const remote = config({ leaderElection: { peers: ["127.0.0.1:50051", "10.0.0.6:50051"] } });
    expect(issues(() => aggregatorPeers(remote, 2))[0]).toMatch(/10\.0\.0\.6:50051 is not on this machine/);
  });

  it("ships config/local-replicas.yaml: two local peers, the fake pods of config/local-fleet.yaml", () => {
    const local = loadGatewayConfig(join(projectRoot, "config", "local-replicas.yaml"));
    expect(aggregatorPeers(local, 2)).toEqual(["127.0.0.1:50051", "127.0.0.1:50052"]);
    expect(loadLocalFleet(join(projectRoot, "config", "local-fleet.yaml"), local)).toHaveLength(4);
  });

  it("puts Envoy k on gateway.port + k and admin on adminPort + k, and keeps port 0 as any", () => {
    const claims = replicaPortClaims(config(), { count: 3 });
    expect(claims.map((c) => c.port)).toEqual([8080, 9901, 8081, 9902, 8082, 9903]);
    expect(claims[4].part).toBe("gateway.port + 2 (Envoy 2)");
    expect(replicaPortClaims(config(), { count: 2, gatewayPort: 0, adminPort: 0 }).map((c) => c.port)).toEqual([0, 0, 0, 0]);
  });

  it("renders a front that round-robins over the replicas, checks their /health and retries only failures before an answer on another replica", () => {
    const front = parseYaml(renderFrontBootstrap({ host: "127.0.0.1", port: 8000, replicas: ["127.0.0.1:8080", "127.0.0.1:8081", "127.0.0.1:8082"], healthCheckMs: 250 }));
    const cluster = front.static_resources.clusters[0];
    expect(cluster.lb_policy).toBe("ROUND_ROBIN");
    expect(cluster.load_assignment.endpoints[0].lb_endpoints.map((e: any) => e.endpoint.address.socket_address.port_value)).toEqual([8080, 8081, 8082]);
    expect(cluster.health_checks[0]).toMatchObject({ interval: "0.25s", http_health_check: { path: "/health" } });
    const route = front.static_resources.listeners[0].filter_chains[0].filters[0].typed_config.route_config.virtual_hosts[0].routes[0].route;
    expect(route.retry_policy.retry_on).toBe("connect-failure,reset,refused-stream");
    expect(route.retry_policy.num_retries).toBe(2);
    expect(route.retry_policy.retry_host_predicate[0].name).toBe("envoy.retry_host_predicates.previous_hosts");
    expect(() => renderFrontBootstrap({ host: "127.0.0.1", port: 0, replicas: [] })).toThrow(/at least one replica/);
    expect(() => renderFrontBootstrap({ host: "127.0.0.1", port: 0, replicas: ["nowhere"] })).toThrow(/nowhere is not host:port/);
  });
});

describe("live bench --envoys", () => {
  it("is a live-mode option of distinct counts", () => {
    const args = parse(["--mode", "live", "--scenario", "heterogeneous", "--envoys", "1,3"]);
    expect(args !== "help" && args.envoys).toEqual([1, 3]);
    expect(() => parse(["--scenario", "heterogeneous", "--envoys", "3"])).toThrow(/--envoys: needs --mode live/);
    expect(() => parse(["--mode", "live", "--scenario", "heterogeneous", "--envoys", "3,3"])).toThrow(/repeated/);
    expect(() => parse(["--mode", "live", "--scenario", "heterogeneous", "--envoys", "0"])).toThrow(/1\.\.8/);
  });

  it("compares each count's p95 with one Envoy's", () => {
    const result = (policy: string, ttft: number, e2e: number, completedShare: number) =>
      ({ policy, ttftMs: { p95: ttft }, e2eMs: { p95: e2e }, completedShare }) as unknown as PolicyResult;
    const rows = envoysRows([result("ours:default/1-envoy", 200, 1000, 1), result("ours:default/3-envoys", 230, 1050, 0.99)], "ours:default", [1, 3]);
    expect(rows.map((r) => r.envoys)).toEqual([1, 3]);
    expect(rows[1].ttftVsOne).toBeCloseTo(0.15);
    expect(rows[1].e2eVsOne).toBeCloseTo(0.05);
    expect(rows[1].goodput).toBe(0.99);
  });
});
