// Renders the Envoy bootstrap from a gateway config file, e.g. for the
// one-shot render service in docker-compose.yml:
//   node dist/host/envoy/render-main.js --config FILE --out FILE [--wasm PATH]
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { parseArgs } from "node:util";
import { loadGatewayConfig } from "../config.js";
import { filterWasmPath } from "../paths.js";
import { envoyParamsFromGatewayConfig, renderEnvoyConfig } from "./config.js";

const USAGE = "usage: render-main --config FILE --out FILE [--wasm PATH]";

function main(): void {
  const { values } = parseArgs({
    options: {
      config: { type: "string" },
      out: { type: "string" },
      wasm: { type: "string" },
    },
  });
  if (!values.config || !values.out) throw new Error(USAGE);

  const yaml = renderEnvoyConfig(
    envoyParamsFromGatewayConfig(loadGatewayConfig(values.config), {
      // The path as Envoy will see it, which in a container differs from ours.
      wasmPath: resolve(values.wasm ?? filterWasmPath),
    }),
  );
  mkdirSync(dirname(resolve(values.out)), { recursive: true });
  writeFileSync(values.out, yaml);
  process.stdout.write(`wrote ${values.out}\n`);
}

try {
  main();
} catch (err) {
  process.stderr.write(`render-main: ${(err as Error).message}\n`);
  process.exit(1);
}
