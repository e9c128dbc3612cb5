// HTTPS end to end through a real Envoy: the listener's certificate from a
// Secret-style folder (file-watched SDS) with client certificates required,
// h2 by ALPN, a rotated certificate served without a restart, and pods that
// serve HTTPS to both Envoy and the aggregator's scrapes.
import http2 from "node:http2";
import { join } from "node:path";
import tls from "node:tls";
import OpenAI from "openai";
import { stringify } from "yaml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseGatewayConfig } from "../../host/config.js";
import { startStack, type Stack } from "../../testing/launcher/stack.js";
import { startFleet, type Fleet } from "../../testing/fakeserver/index.js";
import { waitFor } from "../helpers/stack.js";
import { certificateFolder, httpsFetch, secretVolume, type Pem, type TestCa } from "../helpers/tls.js";

const certs = certificateFolder();
let serverCa: TestCa;
let client: Pem;
let strangerClient: Pem;
let clientCa: TestCa;
let volume: ReturnType<typeof secretVolume>;
let fleet: Fleet;
let stack: Stack;
let hostPort: string;

beforeAll(async () => {
  serverCa = certs.ca("server-ca");
  clientCa = certs.ca("client-ca");
  const podCa = certs.ca("pod-ca");
  client = clientCa.issue("app", "client");
  strangerClient = certs.ca("stranger-ca").issue("app", "client");
  const first = serverCa.issue("gateway.test", "server");
  volume = secretVolume(join(certs.dir, "listener"));
  volume.publish({ "tls.crt": first.cert, "tls.key": first.key, "ca.crt": clientCa.cert });

  const pod = podCa.issue("pod.test", "server");
  fleet = await startFleet([{ name: "pod-a", model: "llama-3.1-8b" }], { tls: { cert: pod.cert, key: pod.key } });
  const config = parseGatewayConfig(stringify({
    gateway: {
      host: "127.0.0.1", port: 0, adminPort: 0,
      tls: { certFile: join(certs.dir, "listener", "tls.crt"), keyFile: join(certs.dir, "listener", "tls.key"), clientCaFile: join(certs.dir, "listener", "ca.crt"), requireClientCert: true },
    },
    aggregator: { host: "127.0.0.1", port: 0, metricsPort: 0 },
    pools: [{ name: "llama", baseModel: "llama-3.1-8b", endpoints: [fleet.pod("pod-a").address], tls: { caFile: podCa.certFile, serverName: "pod.test" } }],
  }), "tls stack");
  stack = await startStack(config, { metricsPort: false, concurrency: 1 });
  hostPort = stack.envoy.listenerAddresses.llm_gateway;
}, 60_000);

afterAll(async () => {
  await stack?.close();
  await fleet?.close();
  certs.remove();
});

/** One handshake: the certificate served, or the error that ended it. */
function handshake(opts: { cert?: string; key?: string }): Promise<{ serial?: string; error?: Error }> {
  const [host, port] = [hostPort.slice(0, hostPort.lastIndexOf(":")), Number(hostPort.slice(hostPort.lastIndexOf(":") + 1))];
  return new Promise((resolve) => {
    const socket = tls.connect({ host, port, ca: serverCa.cert, servername: "gateway.test", ...opts });
    socket.once("secureConnect", () => {
      const serial = socket.getPeerCertificate().serialNumber;
      // TLS 1.3 reports a refused client certificate after the handshake: read once.
      socket.write("GET /health HTTP/1.1\r\nhost: x\r\n\r\n");
      socket.once("data", () => {
        socket.destroy();
        resolve({ serial });
      });
    });
    socket.once("error", (error) => {
      socket.destroy();
      resolve({ error });
    });
  });
}

describe("HTTPS at the listener", () => {
  it("serves the official openai client over HTTPS, to a pod over HTTPS", async () => {
    const openai = new OpenAI({ baseURL: `${stack.gatewayUrl}/v1`, apiKey: "unused", maxRetries: 0, fetch: httpsFetch({ ca: serverCa.cert, cert: client.cert, key: client.key }) });
    expect(stack.gatewayUrl.startsWith("https://")).toBe(true);
    const answer = await openai.chat.completions.create({ model: "llama-3.1-8b", messages: [{ role: "user", content: "hi" }], max_tokens: 4 });
    expect(answer.choices[0].message.content?.length).toBeGreaterThan(0);
    // The aggregator scraped the pod over HTTPS too: its entry is fresh.
    await waitFor("the HTTPS pod fresh in the snapshot", () => stack.aggregator.current().pools[0].endpoints.some((e) => e.fresh));
  });

  it("negotiates h2 by ALPN", async () => {
    const session = http2.connect(stack.gatewayUrl, { ca: serverCa.cert, cert: client.cert, key: client.key, servername: "gateway.test" });
    try {
      await new Promise<void>((resolve, reject) => session.once("connect", () => resolve()).once("error", reject));
      expect(session.alpnProtocol).toBe("h2");
      const status = await new Promise<number>((resolve, reject) => {
        const req = session.request({ ":method": "POST", ":path": "/v1/chat/completions", "content-type": "application/json" });
        req.once("response", (h) => resolve(Number(h[":status"])));
        req.once("error", reject);
        req.end(JSON.stringify({ model: "llama-3.1-8b", messages: [{ role: "user", content: "hi" }], max_tokens: 2 }));
        req.resume();
      });
      expect(status).toBe(200);
    } finally {
      session.close();
    }
  });

  it("refuses a client certificate from another CA, and a client without one", async () => {
    expect((await handshake({ cert: client.cert, key: client.key })).serial).toBeDefined();
    expect((await handshake({ cert: strangerClient.cert, key: strangerClient.key })).error).toBeDefined();
    expect((await handshake({})).error).toBeDefined();
  });

  it("serves a rotated certificate to new handshakes without a restart", async () => {
    const before = (await handshake({ cert: client.cert, key: client.key })).serial;
    const next = serverCa.issue("gateway.test", "server");
    const expected = (await import("node:crypto")).X509Certificate;
    const nextSerial = new expected(next.cert).serialNumber;
    expect(nextSerial).not.toBe(before);
    const pid = stack.envoy.pid;
    volume.publish({ "tls.crt": next.cert, "tls.key": next.key, "ca.crt": clientCa.cert });
    await waitFor("the new certificate served", async () => (await handshake({ cert: client.cert, key: client.key })).serial === nextSerial, 15_000);
    expect(stack.envoy.pid).toBe(pid);
  });
});
