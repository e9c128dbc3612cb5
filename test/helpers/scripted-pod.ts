// A pod whose two halves can fail apart, as a real engine's can: /metrics
// answers like an idle vLLM (or fails), and chat completions are answered,
// or read and never answered (an engine hang behind a live API server).
// Every completion's arrival is recorded, so a test can tell exactly when a
// request reached the pod.
import http from "node:http";
import type net from "node:net";

export interface ScriptedPod {
  readonly name: string;
  /** "127.0.0.1:port" */
  readonly address: string;
  /** Date.now() of every completion request that reached the pod. */
  readonly arrivals: number[];
  /** true: completions are read and never answered. */
  hang: boolean;
  /** false: /metrics answers 500. */
  metricsOk: boolean;
  close(): Promise<void>;
}

const IDLE_METRICS = [
  'vllm:num_requests_running{engine="0",model_name="m"} 0.0',
  'vllm:num_requests_waiting{engine="0",model_name="m"} 0.0',
  'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.0',
  "",
].join("\n");

export async function startScriptedPod(name: string, model: string): Promise<ScriptedPod> {
  const sockets = new Set<net.Socket>();
  const pod = {
    name,
    address: "",
    arrivals: [] as number[],
    hang: false,
    metricsOk: true,
    close: async () => {},
  };
  const server = http.createServer((req, res) => {
    res.setHeader("x-served-by", name);
    if (req.method === "GET" && req.url === "/metrics") {
      res.statusCode = pod.metricsOk ? 200 : 500;
      res.end(pod.metricsOk ? IDLE_METRICS : "engine unavailable\n");
      return;
    }
    if (req.method !== "POST" || req.url !== "/v1/chat/completions") {
      res.statusCode = 404;
      res.end();
      return;
    }
    pod.arrivals.push(Date.now());
    req.resume();
    req.on("end", () => {
      if (pod.hang) return;
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify({
        id: "chatcmpl-scripted",
        object: "chat.completion",
        created: 0,
        model,
        choices: [{ index: 0, message: { role: "assistant", content: "hello" }, finish_reason: "stop" }],
        usage: { prompt_tokens: 4, completion_tokens: 1, total_tokens: 5 },
      }));
    });
  });
  server.on("connection", (s) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  pod.address = `127.0.0.1:${(server.address() as net.AddressInfo).port}`;
  pod.close = () => new Promise<void>((resolve) => {
    for (const s of sockets) s.destroy();
    server.close(() => resolve());
  });
  return pod;
}
