// A real Envoy reaching the aggregator over mutual TLS: its Wasm link
// (snapshots) and its ADS stream (clusters, routes, endpoints) both run on
// the TLS aggregator cluster with a client certificate from file-watched
// SDS, requests are routed end to end, and a rotated client certificate is
// picked up by the running Envoy.
import { X509Certificate } from "node:crypto";
import { rmSync } from "node:fs";
import OpenAI from "openai";
import { afterAll, beforeAll, expect, it } from "vitest";
import { certDir, issueLeaf, makeCa, makeClientCert, makeServerCert, writeLeaf, type CertificateAuthority, type Leaf } from "../helpers/certs.js";
import { startTestStack, waitFor, type TestStack } from "../helpers/stack.js";

let dir: string;
let ca: CertificateAuthority;
let envoyCert: Leaf;
let stack: TestStack;

beforeAll(async () => {
  dir = certDir();
  ca = makeCa(dir, "control-plane");
  const server = makeServerCert(ca, dir, "aggregator", ["llm-gateway-aggregator", "127.0.0.1"]);
  envoyCert = makeClientCert(ca, dir, "envoy", "llm-gateway-envoy");
  stack = await startTestStack(
    [{ name: "llama", baseModel: "llama-3.1-8b", pods: [{ name: "llama-a" }] }],
    { controlPlaneTls: { caFile: ca.certFile, certFile: envoyCert.certFile, keyFile: envoyCert.keyFile, serverName: "llm-gateway-aggregator" } },
    {},
    { tls: { caFile: ca.certFile, certFile: server.certFile, keyFile: server.keyFile, refreshMs: 200 } },
  );
});

afterAll(async () => {
  await stack?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** Serial numbers of the client certificates Envoy holds for the aggregator cluster (admin /certs). */
async function clientSerials(): Promise<string[]> {
  const certs = (await (await fetch(`${stack.envoy.adminUrl}/certs`)).json()) as {
    certificates?: Array<{ cert_chain?: Array<{ serial_number: string }> }>;
  };
  return (certs.certificates ?? []).flatMap((c) => (c.cert_chain ?? []).map((x) => x.serial_number.toLowerCase()));
}

const serialOf = (pem: string) => new X509Certificate(pem).serialNumber.toLowerCase();

it("routes requests with snapshots and ADS both over mutual TLS", async () => {
  const client = new OpenAI({ baseURL: `${stack.gatewayUrl}/v1`, apiKey: "x", maxRetries: 0 });
  const r = await client.chat.completions.create({ model: "llama-3.1-8b", messages: [{ role: "user", content: "hi" }], max_tokens: 2 });
  expect(r.choices[0].message.content).toBeTruthy();
  const stats = await stack.envoy.stats("^cluster\\.llm_gateway_aggregator\\.ssl\\.handshake$|^cluster\\.llm_gateway_pool_llama\\.update_success$");
  expect(stats["cluster.llm_gateway_aggregator.ssl.handshake"]).toBeGreaterThanOrEqual(1);
  expect(stats["cluster.llm_gateway_pool_llama.update_success"]).toBeGreaterThanOrEqual(1);
  // The snapshot came over the TLS link: the filter knows the pod's pool.
  const models = (await (await fetch(`${stack.gatewayUrl}/v1/models`)).json()) as { data: Array<{ id: string }> };
  expect(models.data.map((m) => m.id)).toEqual(["llama-3.1-8b"]);
  expect(await clientSerials()).toContain(serialOf(envoyCert.cert));
});

it("picks up a rotated client certificate without a restart", async () => {
  const pid = stack.envoy.pid;
  const rotated = writeLeaf(dir, "envoy", issueLeaf(ca, { commonName: "llm-gateway-envoy-rotated", usage: "client" }));
  await waitFor("Envoy to load the rotated client certificate", async () => (await clientSerials()).includes(serialOf(rotated.cert)));
  expect(await clientSerials()).not.toContain(serialOf(envoyCert.cert));
  expect(stack.envoy.pid).toBe(pid);
  const r = await fetch(`${stack.gatewayUrl}/v1/models`);
  expect(r.status).toBe(200);
});
