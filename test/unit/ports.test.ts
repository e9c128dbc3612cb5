import net from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { checkPortsFree, explainBindError, PortUnavailableError, type PortClaim } from "../../host/ports.js";
import { stablePort } from "../helpers/stack.js";

const servers: net.Server[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => new Promise((resolve) => s.close(resolve))));
});

async function occupy(port: number): Promise<void> {
  const server = net.createServer();
  servers.push(server);
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", resolve);
  });
}

const claim = (part: string, port: number, host = "127.0.0.1"): PortClaim => ({ part, host, port });

describe("checkPortsFree", () => {
  it("passes free ports and leaves them free; skips port 0", async () => {
    const a = await stablePort();
    await expect(checkPortsFree([claim("gateway.port", a), claim("aggregator.port", 0), claim("aggregator.metricsPort", 0)])).resolves.toBeUndefined();
    // Released again after the check: this process can bind it.
    await expect(occupy(a)).resolves.toBeUndefined();
  });

  it("names the part and port that another process listens on", async () => {
    const [free, taken] = [await stablePort(), await stablePort()];
    await occupy(taken);
    const err = await checkPortsFree([claim("gateway.port", free), claim("fleet pods[1].port", taken)]).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PortUnavailableError);
    expect((err as Error).message).toBe(`fleet pods[1].port ${taken} is already in use on 127.0.0.1 (is another gateway running?)`);
  });

  it("refuses two parts of the same stack on one port, a wildcard host included", async () => {
    const p = await stablePort();
    await expect(checkPortsFree([claim("gateway.port", p), claim("aggregator.port", p, "0.0.0.0")])).rejects.toThrow(
      `aggregator.port ${p} on 0.0.0.0: also used by gateway.port (127.0.0.1:${p})`,
    );
    // Different loopback addresses do not collide.
    await checkPortsFree([claim("gateway.port", p), claim("aggregator.port", p, "127.0.0.2")]);
  });

  it("says when the host is not an address of this machine", async () => {
    await expect(checkPortsFree([claim("gateway.port", await stablePort(), "192.0.2.1")])).rejects.toThrow(
      /^gateway\.port \d+: cannot listen on 192\.0\.2\.1, which is not an address of this machine$/,
    );
  });
});

describe("explainBindError", () => {
  const claims = [claim("gateway.port", 8080), claim("gateway.adminPort", 9901), claim("aggregator.port", 0)];

  it("maps Envoy's and Node's address-in-use errors to the claim with that port", () => {
    const envoy = new Error("Envoy exited during startup (code 1)\n--- last Envoy log lines ---\n[info][main] listener on 127.0.0.1:8080\ncannot bind '127.0.0.1:9901': Address already in use");
    expect((explainBindError(envoy, claims) as Error).message).toBe("gateway.adminPort 9901 is already in use on 127.0.0.1 (is another gateway running?)");
    const grpc = new Error("No address added out of total 1 resolved errors: [listen EADDRINUSE: address already in use 127.0.0.1:8080]");
    expect(explainBindError(grpc, claims)).toBeInstanceOf(PortUnavailableError);
    const node = Object.assign(new Error("listen EADDRINUSE: address already in use ::1:8080"), { code: "EADDRINUSE" });
    expect((explainBindError(node, claims) as PortUnavailableError).claim.part).toBe("gateway.port");
  });

  it("returns any other error unchanged", () => {
    const other = new Error("Envoy exited during startup (code 1)\nunknown field NOT_A_TYPE on 127.0.0.1:8080");
    expect(explainBindError(other, claims)).toBe(other);
    const elsewhere = new Error("cannot bind '127.0.0.1:7000': Address already in use");
    expect(explainBindError(elsewhere, claims)).toBe(elsewhere);
  });
});
