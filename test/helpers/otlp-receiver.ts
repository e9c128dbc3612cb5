// Starts testing/otlp-receiver/receiver.py (the official OTLP TraceService
// over gRPC, from PyPI's opentelemetry-proto and grpcio in .venv) and
// collects the spans it prints.
import { spawn, spawnSync } from "node:child_process";
import { join } from "node:path";
import { projectRoot } from "../../host/paths.js";

const python = join(projectRoot, ".venv", "bin", "python");
const script = join(projectRoot, "testing", "otlp-receiver", "receiver.py");

export interface ReceivedSpan {
  name: string;
  service: string;
  trace_id: string;
  attributes: Record<string, string | number | boolean>;
}

/** True when .venv's Python has the receiver's packages (testing/otlp-receiver/requirements.txt). */
export function otlpReceiverAvailable(): boolean {
  return spawnSync(python, ["-c", "import grpc, opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc"], { stdio: "ignore" }).status === 0;
}

export async function startOtlpReceiver(): Promise<{ port: number; spans: () => ReceivedSpan[]; close: () => Promise<void> }> {
  const child = spawn(python, [script], { stdio: ["pipe", "pipe", "inherit"] });
  const spans: ReceivedSpan[] = [];
  let out = "";
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("the OTLP receiver did not start within 10 s")), 10_000);
    child.once("exit", (code) => reject(new Error(`the OTLP receiver exited (${code})`)));
    child.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
      out += chunk;
      let nl: number;
      while ((nl = out.indexOf("\n")) >= 0) {
        const line = out.slice(0, nl);
        out = out.slice(nl + 1);
        const listening = /^listening on (\d+)$/.exec(line);
        if (listening) {
          clearTimeout(timer);
          resolve(Number(listening[1]));
        } else if (line.startsWith("{")) {
          spans.push(JSON.parse(line) as ReceivedSpan);
        }
      }
    });
  });
  return {
    port,
    spans: () => spans,
    close: () => new Promise<void>((resolve) => {
      if (child.exitCode !== null) return resolve();
      child.once("exit", () => resolve());
      child.stdin!.end();
      setTimeout(() => child.kill("SIGKILL"), 3_000).unref();
    }),
  };
}
