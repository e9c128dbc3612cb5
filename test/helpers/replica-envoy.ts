// Another Envoy on a test stack's aggregator, as a replica of the stack's
// own: rendered from the same config, with SDS files of its own.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { envoyParamsFromGatewayConfig, envoySdsFiles, renderEnvoyXds } from "../../host/envoy/index.js";
import { filterWasmPath } from "../../host/paths.js";
import { startEnvoy, type EnvoyProcess } from "../../testing/launcher/envoy-process.js";
import type { TestStack } from "./stack.js";

export interface ReplicaEnvoy {
  envoy: EnvoyProcess;
  /** Its gateway listener, http://host:port. */
  url: string;
  /** Stops it (if a test has not) and removes its files. */
  close(): Promise<void>;
}

export async function startReplicaEnvoy(stack: TestStack): Promise<ReplicaEnvoy> {
  const sdsDir = mkdtempSync(join(tmpdir(), "llm-gateway-sds-"));
  try {
    const params = envoyParamsFromGatewayConfig(stack.config, { wasmPath: filterWasmPath, sdsDir });
    for (const f of envoySdsFiles(params)) writeFileSync(f.path, f.content);
    const envoy = await startEnvoy({
      configYaml: renderEnvoyXds({ ...params, gatewayPort: 0, adminPort: 0, aggregatorPort: stack.aggregator.grpcPort }).bootstrap,
      concurrency: 2,
    });
    return {
      envoy,
      url: `http://${envoy.listenerAddresses.llm_gateway}`,
      async close() {
        await envoy.stop();
        rmSync(sdsDir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    rmSync(sdsDir, { recursive: true, force: true });
    throw err;
  }
}
