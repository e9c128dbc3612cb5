/**
 * CLI: start a fleet of fake model servers.
 *
 *   node dist/host/fakeserver/main.js --config pods.yaml [--admin]
 *   node dist/host/fakeserver/main.js --pods '[{"name":"a","model":"llama"}]'
 *
 * Prints `pod <name> <model> http://127.0.0.1:<port>` per pod, then
 * `fleet ready`; stops cleanly on SIGINT / SIGTERM.
 */
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { parseFleetFile, startFleet } from "./fleet.js";

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      config: { type: "string" },
      pods: { type: "string" },
      admin: { type: "boolean", default: false },
    },
  });
  if ((values.config === undefined) === (values.pods === undefined)) {
    throw new Error("usage: main.js (--config FILE | --pods JSON) [--admin]");
  }
  const specs = parseFleetFile(values.config !== undefined ? readFileSync(values.config, "utf8") : (values.pods as string));
  const fleet = await startFleet(specs, { admin: values.admin });
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
