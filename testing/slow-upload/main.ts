// The slow-upload attack from the command line:
//   npm run build:host && node dist/testing/slow-upload/main.js [--target HOST:PORT --pid ENVOY_PID --model NAME]
//     [--connections 150] [--body 4000000] [--sent 3900000] [--hold-s 20]
// Without --target it starts its own gateway (this checkout's Envoy config)
// in front of one fake pod on loopback and attacks that. Prints progress and
// a JSON result; exits 0 whatever the numbers are.
import { parseArgs } from "node:util";
import { startFleetStack } from "../launcher/stack.js";
import { slowUploadAttack } from "./attack.js";

const { values } = parseArgs({
  options: {
    target: { type: "string" },
    pid: { type: "string" },
    model: { type: "string", default: "llama-3.1-8b" },
    connections: { type: "string", default: "150" },
    body: { type: "string", default: "4000000" },
    sent: { type: "string", default: "3900000" },
    "hold-s": { type: "string", default: "20" },
  },
});

const stack = values.target ? null : await startFleetStack([{ name: "llama", baseModel: "llama-3.1-8b", pods: [{ name: "llama-a" }] }]);
try {
  const target = values.target ?? stack!.envoy.listenerAddresses.llm_gateway;
  const pid = values.pid ? Number(values.pid) : stack!.envoy.pid;
  const result = await slowUploadAttack({
    target,
    envoyPid: pid,
    model: values.model!,
    connections: Number(values.connections),
    bodyBytes: Number(values.body),
    sentBytes: Number(values.sent),
    holdMs: Number(values["hold-s"]) * 1000,
    progress: (line) => process.stderr.write(`[slow-upload] ${line}\n`),
  });
  process.stdout.write(JSON.stringify(result, null, 2) + "\n");
} finally {
  await stack?.close();
}
