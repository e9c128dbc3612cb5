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
import { envoyParamsFromGatewayConfig, envoySdsFiles, renderEnvoyConfig, renderEnvoyXds } from "./config.js";

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

  const outDir = dirname(resolve(values.out));
  const params = envoyParamsFromGatewayConfig(loadGatewayConfig(values.config), {
    // The path as Envoy will see it, which in a container differs from ours.
    wasmPath: resolve(values.wasm ?? filterWasmPath),
    // The SDS files go beside the bootstrap; they name the certificate files, which Envoy watches.
    sdsDir: outDir,
  });
  const yaml = values.complete ? renderEnvoyConfig(params) : renderEnvoyXds(params).bootstrap;
  mkdirSync(outDir, { recursive: true });
  for (const f of envoySdsFiles(params)) {
    writeFileSync(f.path, f.content);
    process.stdout.write(`wrote ${f.path}\n`);
  }
  writeFileSync(values.out, yaml);
  process.stdout.write(`wrote ${values.out}\n`);
}

try {
  main();
} catch (err) {
  process.stderr.write(`render-main: ${(err as Error).message}\n`);
  process.exit(1);
}
