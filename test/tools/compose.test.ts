// docker-compose.yml and the project image it runs. CI runs the stack for
// real (scripts/compose/run-standins.sh: stand-in base images, a private
// dockerd, the openai client through Envoy); this file checks, without a
// container engine, that the pieces fit: the file as docker-compose reads it
// (`docker-compose config`), the gateway config it mounts, the Envoy init
// step's bootstrap, and that the image holds every file the code loads.
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse as parseYaml } from "yaml";
import { contractPath } from "../../host/contract.js";
import { loadGatewayConfig, parseEndpoint } from "../../host/config.js";
import { loadLocalFleet } from "../../testing/fakeserver/index.js";
import { envoyParamsFromGatewayConfig, gatewayTemplatePath, renderEnvoyConfig, renderEnvoyXds } from "../../host/envoy/index.js";
import { validateEnvoyConfig } from "../../testing/launcher/envoy-process.js";
import { filterWasmPath, projectRoot, protoPath } from "../../host/paths.js";
import { commandRuns, skipWithout } from "../helpers/requirements.js";

const root = projectRoot;
const composeFile = join(root, "docker-compose.yml");
const version = JSON.parse(readFileSync(join(root, "package.json"), "utf8")).version as string;
const gatewayImage = `llm-gateway:${version}`;
const fleetImage = `llm-gateway-fake-fleet:${version}`;
// config/ is mounted at /etc/llm-gateway in every container of the project image.
const gatewayConfigInContainer = "/etc/llm-gateway/compose.yaml";
const envoyDir = "/envoy-config";

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
const haveCompose = !skipWithout(
  commandRuns("docker-compose", ["version"]),
  "compose.test (`docker-compose config`)",
  "docker-compose is not installed (Debian: apt-get install docker-compose)",
);

describe.skipIf(!haveCompose)("docker-compose.yml", () => {
  // Read in a hook, not in the describe body: vitest runs that body even when the suite is skipped.
  let doc: any;
  let svc: any;
  beforeAll(() => {
    doc = composeConfig();
    svc = doc.services;
  });

  it("runs the product image for the aggregator and the init step, the fake fleet's image for the pods, the official Envoy image for Envoy", () => {
    expect(Object.keys(svc).sort()).toEqual(["aggregator", "envoy", "envoy-init", "fleet"]);
    expect(svc.envoy.image).toBe("envoyproxy/envoy:v1.40.0");
    for (const name of ["aggregator", "envoy-init"]) {
      expect(svc[name].image, name).toBe(gatewayImage);
      expect(svc[name].build, name).toMatchObject({ context: root, target: "gateway" });
    }
    expect(svc.fleet.image).toBe(fleetImage);
    expect(svc.fleet.build).toMatchObject({ context: root, target: "fake-fleet" });
    for (const name of ["aggregator", "envoy-init", "fleet"]) {
      expect(svc[name].volumes, name).toContain(`${join(root, "config")}:/etc/llm-gateway:ro`);
    }
  });

  it("starts the fleet and the aggregator from the image's build, with the compose gateway config", () => {
    expect(svc.fleet.command.slice(0, 2)).toEqual(["node", "dist/testing/fakeserver/main.js"]);
    expect(arg(svc.fleet.command, "--fleet")).toBe("/etc/llm-gateway/compose-fleet.yaml");
    expect(svc.aggregator.command.slice(0, 2)).toEqual(["node", "dist/host/aggregator/main.js"]);
    for (const name of ["fleet", "aggregator"]) expect(arg(svc[name].command, "--config")).toBe(gatewayConfigInContainer);
    // Pods must be reachable from the aggregator's and Envoy's containers.
    expect(arg(svc.fleet.command, "--host")).toBe("0.0.0.0");
  });

  it("starts Envoy only after the init step filled the shared volume, which Envoy mounts read-only at the same path", () => {
    expect(svc["envoy-init"].command).toEqual(["llm-gateway-envoy-init", gatewayConfigInContainer, envoyDir]);
    expect(svc.envoy.depends_on["envoy-init"]).toEqual({ condition: "service_completed_successfully" });
    expect(svc.envoy.depends_on.aggregator).toEqual({ condition: "service_started" });
    expect(doc.volumes).toHaveProperty("envoy-config");
    expect(svc["envoy-init"].volumes).toContain(`envoy-config:${envoyDir}:rw`);
    expect(svc.envoy.volumes).toEqual([`envoy-config:${envoyDir}:ro`]);
    expect(arg(svc.envoy.command, "-c")).toBe(`${envoyDir}/envoy.yaml`);
  });

  it("runs every container as the Kubernetes manifests do: non-root, read-only root, no capabilities, no privilege gain", () => {
    for (const [name, s] of Object.entries<any>(svc)) {
      expect(s.read_only, name).toBe(true);
      expect(s.cap_drop, name).toEqual(["ALL"]);
      expect(s.security_opt, name).toEqual(["no-new-privileges:true"]);
    }
    // The project image's USER (the Dockerfile test below), and the envoy user of the Envoy image.
    expect(svc.envoy.user).toBe("101:101");
  });

  it("publishes the gateway port (GATEWAY_PORT, default 8080) and the aggregator's metrics on loopback only", () => {
    expect(svc.envoy.ports).toEqual(["127.0.0.1:8080:8080/tcp"]);
    expect(composeConfig({ GATEWAY_PORT: "18080" }).services.envoy.ports).toEqual(["127.0.0.1:18080:8080/tcp"]);
    expect(svc.aggregator.ports).toEqual(["127.0.0.1:9464:9464/tcp"]);
    expect(arg(svc.envoy.command, "--concurrency")).toBe("2");
  });
});

describe("the project image (Dockerfile)", () => {
  const dockerfile = readFileSync(join(root, "Dockerfile"), "utf8");
  const ignore = readFileSync(join(root, ".dockerignore"), "utf8")
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith("#"));
  /** The build context keeps only what .dockerignore lets back in after its leading `*`. */
  const kept = ignore.filter((l) => l.startsWith("!")).map((l) => l.slice(1));
  const inside = (path: string, dirOrFile: string) =>
    dirOrFile.endsWith("/") ? path.startsWith(dirOrFile) : path === dirOrFile;

  /**
   * Each stage by name: the stage or image it is built on, the sources of its
   * COPY instructions as project paths (the last word is the destination; a
   * `--from=build` source is a path in the build stage's /src, that is the
   * project's layout), and which of them come from the build context.
   */
  const stages = new Map<string, { from: string; block: string; copies: string[]; fromContext: string[] }>();
  for (const block of dockerfile.split(/^(?=FROM )/m).filter((b) => b.startsWith("FROM "))) {
    const [, from, name] = /^FROM (\S+) AS (\S+)$/m.exec(block)!;
    const copies: string[] = [];
    const fromContext: string[] = [];
    for (const m of block.matchAll(/^COPY\s+(.+)$/gm)) {
      const words = m[1].split(/\s+/);
      const stage = /^--from=(\S+)$/.exec(words[0])?.[1];
      const sources = words.slice(stage ? 1 : 0, -1);
      if (stage) {
        expect(stage, "stages copy only the build stage's outputs").toBe("build");
        copies.push(...sources.map((src) => src.replace(/^\/src\//, "")));
      } else {
        copies.push(...sources);
        fromContext.push(...sources);
      }
    }
    stages.set(name, { from, block, copies, fromContext });
  }
  const copiesOf = (name: string): string[] => {
    const stage = stages.get(name);
    return stage ? [...copiesOf(stage.from), ...stage.copies] : [];
  };

  it("copies into the product image every file the code loads at run time", () => {
    const needed = [protoPath, filterWasmPath, gatewayTemplatePath(), join(root, "dist/host/aggregator/main.js"), join(root, "package.json")];
    for (const path of needed.map((p) => relative(root, p))) {
      expect(copiesOf("gateway").some((src) => inside(path, src)), `${path} is not copied into the image`).toBe(true);
    }
  });

  it("builds from the sources alone: the build context holds no build output, and the build stage compiles what npm run build reads", () => {
    expect(ignore[0]).toBe("*");
    for (const src of kept) expect(src, "let into the build context").not.toMatch(/^(dist|build|node_modules|\.venv)(\/|$)/);
    for (const stage of stages.values()) for (const src of stage.fromContext) expect(kept, src).toContain(src);
    const build = stages.get("build")!;
    expect(build.block).toMatch(/^RUN npm ci\b/m);
    expect(build.block).toMatch(/^RUN npm run build$/m);
    // Every folder the TypeScript compiler's include patterns name, and the files the Wasm build reads.
    const tsInclude = JSON.parse(readFileSync(join(root, "tsconfig.json"), "utf8")).include as string[];
    const needed = [...new Set(tsInclude.map((p) => `${p.split("/")[0]}/`)), "assembly/", "proto/", "asconfig.json", "tsconfig.json", "scripts/gen-contract.mjs"];
    for (const src of needed) expect(build.copies, `${src} in the build stage`).toContain(src);
  });

  it("runs on node:24-bookworm-slim as the node user, with runtime dependencies only", () => {
    for (const [name, { from }] of stages) if (!stages.has(from)) expect(from, name).toBe("node:24-bookworm-slim");
    expect(dockerfile).toMatch(/^USER 1000:1000$/m);
    // The optional dependency is a Node binary for older hosts: the image has its own Node.
    expect(stages.get("runtime")!.block).toMatch(/npm ci --omit=dev --omit=optional/);
  });

  it("builds the product image (the default, last target) with none of the stand-ins, and the fake fleet's apart", () => {
    expect([...stages.keys()].at(-1)).toBe("gateway");
    expect(copiesOf("gateway").filter((src) => src.startsWith("dist/") && !src.startsWith("dist/host/"))).toEqual([]);
    // What the fake pods load at run time: their code, the engine, the product's config code and the contract it reads.
    expect(copiesOf("fake-fleet")).toEqual(expect.arrayContaining(["proto/", "dist/host/", "dist/testing/fakeserver/", "dist/testing/engine/"]));
  });

  it("copies into the fake fleet's image every module its entry point loads, and the contract file they read", () => {
    // Built by `npm run build` (npm test runs it first): follow the compiled imports from the entry point.
    const seen = new Set<string>();
    const queue = ["dist/testing/fakeserver/main.js"];
    while (queue.length > 0) {
      const file = queue.pop()!;
      if (seen.has(file)) continue;
      seen.add(file);
      for (const m of readFileSync(join(root, file), "utf8").matchAll(/from "(\.{1,2}\/[^"]+)"/g)) queue.push(relative(root, join(root, dirname(file), m[1])));
    }
    const copies = copiesOf("fake-fleet");
    const missing = [...seen].filter((f) => !copies.some((src) => inside(f, src)));
    expect(missing, "modules the fake fleet loads that its image lacks").toEqual([]);
    if (seen.has("dist/host/contract.js")) expect(copies.some((src) => inside(relative(root, contractPath), src))).toBe(true);
  });
});

describe("config/compose.yaml", () => {
  const cfg = loadGatewayConfig(join(root, "config", "compose.yaml"));

  it.skipIf(!haveCompose)("matches the ports and service names of docker-compose.yml", () => {
    const compose = composeConfig();
    // Envoy must listen on all interfaces of its container for the published port.
    expect(cfg.gateway.host).toBe("0.0.0.0");
    expect(compose.services.envoy.ports[0]).toMatch(new RegExp(`:${cfg.gateway.port}/tcp$`));
    expect(compose.services.aggregator.ports[0]).toMatch(new RegExp(`:${cfg.aggregator.metricsPort}/tcp$`));
    expect(Object.keys(compose.services)).toContain(cfg.aggregator.host);
    for (const pool of cfg.pools) {
      for (const ep of pool.endpoints) expect(parseEndpoint(ep)?.host).toBe("fleet");
    }
    const fleetPorts = loadLocalFleet(join(root, "config", "compose-fleet.yaml"), cfg).map((p) => p.port).sort();
    const endpointPorts = cfg.pools.flatMap((p) => p.endpoints.map((e) => parseEndpoint(e)!.port)).sort();
    expect(fleetPorts).toEqual(endpointPorts);
  });

  // Needs build/filter.wasm and dist/ from `npm run build` (run first by `npm test`).
  describe("rendered for Envoy", () => {
    const scratch = mkdtempSync(join(tmpdir(), "compose-render-test-"));
    afterAll(() => rmSync(scratch, { recursive: true, force: true }));

    it("the init step copies the filter and renders the bootstrap the library renders, naming the copy", () => {
      execFileSync("sh", [join(root, "deploy", "envoy-init.sh"), "config/compose.yaml", scratch], {
        cwd: root,
        env: { ...process.env, LLM_GATEWAY_HOME: root },
      });
      const wasm = join(scratch, "filter.wasm");
      expect(readFileSync(wasm).equals(readFileSync(filterWasmPath))).toBe(true);
      expect(readFileSync(join(scratch, "envoy.yaml"), "utf8")).toBe(renderEnvoyXds(envoyParamsFromGatewayConfig(cfg, { wasmPath: wasm })).bootstrap);
    });

    it("passes envoy --mode validate (with the local build of the filter)", async () => {
      expect(existsSync(filterWasmPath), `${filterWasmPath} missing: run npm run build`).toBe(true);
      await validateEnvoyConfig(renderEnvoyConfig(envoyParamsFromGatewayConfig(cfg, { wasmPath: filterWasmPath })));
    }, 30_000);
  });
});
