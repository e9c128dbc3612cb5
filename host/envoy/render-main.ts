// Renders the Envoy bootstrap from a gateway config file, e.g. for the
// one-shot render service in docker-compose.yml:
//   node dist/host/envoy/render-main.js --config FILE --out FILE [--wasm PATH] [--complete]
// By default the bootstrap takes the pools' clusters and routes from the
// aggregator (so config edits reach Envoy without a restart); --complete
// writes every route and cluster into it, for an Envoy without that control plane.
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { parseArgs } from "node:util";
import { loadGatewayConfig } from "../config.js";
import { filterWasmPath } from "../paths.js";
import { envoyParamsFromGatewayConfig, renderEnvoyConfig, renderEnvoyXds } from "./config.js";
import { controlPlaneSdsFiles } from "./control-plane-tls.js";

const USAGE = "usage: render-main --config FILE --out FILE [--wasm PATH] [--complete]";

function main(): void {
  const { values } = parseArgs({
    options: {
      config: { type: "string" },
      out: { type: "string" },
      wasm: { type: "string" },
      complete: { type: "boolean" },
    },
  });
  if (!values.config || !values.out) throw new Error(USAGE);

  const params = envoyParamsFromGatewayConfig(loadGatewayConfig(values.config), {
    // The path as Envoy will see it, which in a container differs from ours.
    wasmPath: resolve(values.wasm ?? filterWasmPath),
    // The control-plane TLS SDS files go next to the bootstrap, for Envoy to read there.
    sdsDir: dirname(resolve(values.out)),
  });
  const yaml = values.complete ? renderEnvoyConfig(params) : renderEnvoyXds(params).bootstrap;
  mkdirSync(dirname(resolve(values.out)), { recursive: true });
  writeFileSync(values.out, yaml);
  for (const sds of params.controlPlaneTls ? controlPlaneSdsFiles(params.controlPlaneTls) : []) writeFileSync(sds.path, sds.text);
  process.stdout.write(`wrote ${values.out}\n`);
}

try {
  main();
} catch (err) {
  process.stderr.write(`render-main: ${(err as Error).message}\n`);
  process.exit(1);
}
