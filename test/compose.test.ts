// docker-compose.yml cannot be run here (no container engine or registry), so
// this checks it the way docker-compose itself reads it (`docker-compose
// config`), and checks that the pieces it wires together fit: the gateway
// config it mounts, the render CLI it runs, and the Envoy config that results.
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { parse as parseYaml } from "yaml";
import { loadGatewayConfig, parseEndpoint } from "../host/config.js";
import {
  envoyParamsFromGatewayConfig,
  renderEnvoyConfig,
  renderEnvoyXds,
  validateEnvoyConfig,
} from "../host/envoy/index.js";
import { filterWasmPath, projectRoot } from "../host/paths.js";

const root = projectRoot;
const composeFile = join(root, "docker-compose.yml");
const gatewayConfigInContainer = "/app/config/compose.yaml";

// The file as docker-compose resolves it, with only the given variables set.
function composeConfig(vars: Record<string, string> = {}): any {
  const out = execFileSync("docker-compose", ["-f", composeFile, "--project-directory", root, "config"], {
    encoding: "utf8",
    env: { PATH: process.env.PATH, HOME: process.env.HOME, ...vars },
  });
  return parseYaml(out);
}

/** Command argument following `flag`. */
function arg(command: string[], flag: string): string {
  const i = command.indexOf(flag);
  expect(i, `${flag} in ${command.join(" ")}`).toBeGreaterThanOrEqual(0);
  return command[i + 1];
}

// Debian's docker-compose (CI installs it: .ci/run). Without it only the file's own reading is skipped.
const haveCompose = spawnSync("docker-compose", ["version"], { stdio: "ignore" }).status === 0;
if (!haveCompose) console.warn("compose.test: docker-compose is not installed; skipping `docker-compose config` (apt-get install docker-compose)");

describe.skipIf(!haveCompose)("docker-compose.yml", () => {
  const doc = composeConfig();
  const svc = doc.services;

  it("has the four services with the expected images", () => {
    expect(Object.keys(svc).sort()).toEqual(["aggregator", "envoy", "envoy-config", "fleet"]);
    expect(svc.envoy.image).toBe("envoyproxy/envoy:v1.40.0");
    for (const name of ["aggregator", "envoy-config", "fleet"]) expect(svc[name].image).toBe("node:20-bookworm-slim");
  });

  it("runs the built project, mounted read-only, with the compose gateway config", () => {
    const mains: Record<string, string> = {
      fleet: "dist/host/fakeserver/main.js",
      aggregator: "dist/host/aggregator/main.js",
      "envoy-config": "dist/host/envoy/render-main.js",
    };
    for (const [name, main] of Object.entries(mains)) {
      const s = svc[name];
      expect(s.command.slice(0, 2)).toEqual(["node", main]);
      expect(arg(s.command, "--config")).toBe(gatewayConfigInContainer);
      expect(s.working_dir).toBe("/app");
      expect(s.volumes).toContain(`${root}:/app:ro`);
    }
  });

  it("starts Envoy only after the config is rendered, from the same file and wasm path", () => {
    expect(svc.envoy.depends_on["envoy-config"]).toEqual({ condition: "service_completed_successfully" });
    expect(svc.envoy.depends_on.aggregator).toEqual({ condition: "service_started" });

    const render = svc["envoy-config"].command;
    const out = arg(render, "--out");
    const wasm = arg(render, "--wasm");
    expect(arg(svc.envoy.command, "-c")).toBe(out);
    // The rendered file travels in a named volume, read-only for Envoy.
    expect(doc.volumes).toHaveProperty("envoy-config");
    expect(svc["envoy-config"].volumes).toContain("envoy-config:/envoy-config:rw");
    expect(svc.envoy.volumes).toContain("envoy-config:/envoy-config:ro");
    expect(out.startsWith("/envoy-config/")).toBe(true);
    // Envoy sees the built filter at the path the render step wrote into its config.
    expect(svc.envoy.volumes).toContain(`${join(root, "build")}:/app/build:ro`);
    expect(wasm).toBe("/app/build/filter.wasm");
  });

  it("publishes the gateway port (GATEWAY_PORT, default 8080) and the aggregator's metrics", () => {
    expect(svc.envoy.ports).toEqual([{ published: 8080, target: 8080 }]);
    expect(composeConfig({ GATEWAY_PORT: "18080" }).services.envoy.ports).toEqual([{ published: 18080, target: 8080 }]);
    expect(svc.aggregator.ports).toEqual([{ published: 9464, target: 9464 }]);
    expect(arg(svc.envoy.command, "--concurrency")).toBe("2");
  });
});

describe("config/compose.yaml", () => {
  const cfg = loadGatewayConfig(join(root, "config", "compose.yaml"));
  const compose = composeConfig();

  it("matches the ports and service names of docker-compose.yml", () => {
    // Envoy must listen on all interfaces of its container for the published port.
    expect(cfg.gateway.host).toBe("0.0.0.0");
    expect(compose.services.envoy.ports[0].target).toBe(cfg.gateway.port);
    expect(compose.services.aggregator.ports[0].target).toBe(cfg.aggregator.metricsPort);
    expect(Object.keys(compose.services)).toContain(cfg.aggregator.host);
    for (const pool of cfg.pools) {
      for (const ep of pool.endpoints) expect(parseEndpoint(ep)?.host).toBe("fleet");
    }
    const fleetPorts = cfg.localFleet!.pods.map((p) => p.port).sort();
    const endpointPorts = cfg.pools.flatMap((p) => p.endpoints.map((e) => parseEndpoint(e)!.port)).sort();
    expect(fleetPorts).toEqual(endpointPorts);
  });

  // Needs build/filter.wasm and dist/ from `npm run build` (run first by `npm test`).
  describe("rendered for Envoy", () => {
    const scratch = mkdtempSync(join(tmpdir(), "compose-render-test-"));
    afterAll(() => rmSync(scratch, { recursive: true, force: true }));

    it("the render CLI writes the same config as the library", () => {
      const out = join(scratch, "envoy.yaml");
      execFileSync(
        process.execPath,
        [join(root, "dist/host/envoy/render-main.js"), "--config", "config/compose.yaml", "--out", out, "--wasm", "/app/build/filter.wasm"],
        { cwd: root, encoding: "utf8" },
      );
      expect(readFileSync(out, "utf8")).toBe(
        renderEnvoyXds(envoyParamsFromGatewayConfig(cfg, { wasmPath: "/app/build/filter.wasm" })).bootstrap,
      );
    });

    it("passes envoy --mode validate (with the local build of the filter)", async () => {
      expect(existsSync(filterWasmPath), `${filterWasmPath} missing: run npm run build`).toBe(true);
      await validateEnvoyConfig(renderEnvoyConfig(envoyParamsFromGatewayConfig(cfg, { wasmPath: filterWasmPath })));
    }, 30_000);
  });
});
