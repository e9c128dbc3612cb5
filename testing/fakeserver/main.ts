/**
 * CLI: start a fleet of fake model servers.
 *
 *   node dist/testing/fakeserver/main.js --config gateway.yaml --fleet fleet.yaml [--host 0.0.0.0] [--admin]
 *   node dist/testing/fakeserver/main.js --pods pods.yaml [--admin]
 *
 * --fleet takes a fake fleet for the pools of the gateway config --config
 * names (local-fleet.ts, e.g. config/local-fleet.yaml); --pods takes a
 * YAML/JSON list of pod specs (or `{ pods: [...] }`). --admin adds
 * GET /admin/state, POST /admin/load and POST /admin/fault ({"mode": "hang"},
 * "break-streams", "stall-stream", or null to clear) to every pod.
 *
 * Prints `pod <name> <model> http://127.0.0.1:<port>` per pod, then
 * `fleet ready`; stops cleanly on SIGINT / SIGTERM.
 */
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { loadGatewayConfig } from "../../host/config.js";
import { parseFleetFile, startFleet, type PodSpec } from "./fleet.js";
import { loadLocalFleet, localFleetSpecs } from "./local-fleet.js";

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      config: { type: "string" },
      fleet: { type: "string" },
      pods: { type: "string" },
      host: { type: "string", default: "127.0.0.1" },
      admin: { type: "boolean", default: false },
    },
  });
  let specs: PodSpec[];
  if (values.pods !== undefined && values.config === undefined && values.fleet === undefined) {
    specs = parseFleetFile(readFileSync(values.pods, "utf8"));
  } else if (values.pods === undefined && values.config !== undefined && values.fleet !== undefined) {
    const config = loadGatewayConfig(values.config);
    specs = localFleetSpecs(loadLocalFleet(values.fleet, config), config);
  } else {
    throw new Error("usage: main.js (--config GATEWAY_CONFIG --fleet FLEET | --pods FILE) [--host ADDR] [--admin]");
  }
  if (specs.length === 0) throw new Error("no pods to start: the fleet lists none");
  const fleet = await startFleet(specs, { admin: values.admin, host: values.host });
  for (const p of fleet.pods) console.log(`pod ${p.name} ${p.model} ${p.url}`);
  console.log("fleet ready");

  let stopping = false;
  const stop = (): void => {
    if (stopping) return;
    stopping = true;
    fleet.close().then(
      () => process.exit(0),
      (err: unknown) => {
        console.error(err);
        process.exit(1);
      },
    );
  };
  process.on("SIGINT", stop);
  process.on("SIGTERM", stop);
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
