// A pool's pods over HTTPS: the aggregator's scrape connection verifies
// them with the pool's CA, refuses a pod whose certificate is not from it,
// and takes a reload's new TLS settings at its next scrape.
import https from "node:https";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ScrapeConnection } from "../../host/aggregator/scrape-connection.js";
import { certificateFolder } from "../helpers/tls.js";

const certs = certificateFolder();
let server: https.Server;
let port: number;
let caFile: string;
let otherCaFile: string;

beforeAll(async () => {
  const ca = certs.ca("pods");
  caFile = ca.certFile;
  otherCaFile = certs.ca("other").certFile;
  const leaf = ca.issue("pod.test", "server");
  server = https.createServer({ cert: leaf.cert, key: leaf.key }, (_req, res) => res.end("vllm:num_requests_running 1\n"));
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  port = (server.address() as AddressInfo).port;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
  certs.remove();
});

const address = () => ({ ip: "127.0.0.1", port, hostHeader: `127.0.0.1:${port}` });
const text = (body: Buffer) => body.toString("utf8");

describe("scraping pods over HTTPS", () => {
  it("reads /metrics from a pod whose certificate chains to the pool's CA and carries its name", async () => {
    const c = new ScrapeConnection(address(), { caFile, serverName: "pod.test" });
    try {
      expect(await c.get(2000, text)).toBe("vllm:num_requests_running 1\n");
      expect(await c.get(2000, text)).toBe("vllm:num_requests_running 1\n");
    } finally {
      c.close();
    }
  });

  it("refuses a pod whose certificate is from another CA, or for another name", async () => {
    for (const tls of [{ caFile: otherCaFile }, { caFile, serverName: "other.test" }]) {
      const c = new ScrapeConnection(address(), tls);
      await expect(c.get(2000, text)).rejects.toThrow();
      c.close();
    }
  });

  it("dials again with a reload's TLS settings", async () => {
    const c = new ScrapeConnection(address(), { caFile });
    try {
      expect(await c.get(2000, text)).toContain("num_requests_running");
      c.setTls({ caFile: otherCaFile });
      await expect(c.get(2000, text)).rejects.toThrow();
    } finally {
      c.close();
    }
  });
});
