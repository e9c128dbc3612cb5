// JWT authentication (Envoy's jwt_authn, configured from the gateway config)
// and Envoy's own error replies rewritten into the OpenAI error format.
import { generateKeyPairSync, sign, type KeyObject } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestStack, waitFor, type TestStack } from "../helpers/stack.js";

const ISSUER = "https://auth.example.test";
const AUDIENCE = "llm-gateway";
const keys = generateKeyPairSync("rsa", { modulusLength: 2048 });
const stranger = generateKeyPairSync("rsa", { modulusLength: 2048 });
const dir = mkdtempSync(join(tmpdir(), "gw-jwt-"));
let stack: TestStack;

function b64url(value: object | Buffer): string {
  return (Buffer.isBuffer(value) ? value : Buffer.from(JSON.stringify(value))).toString("base64url");
}

function token(claims: Record<string, unknown>, key: KeyObject = keys.privateKey): string {
  const head = `${b64url({ alg: "RS256", typ: "JWT", kid: "k1" })}.${b64url(claims)}`;
  return `${head}.${b64url(sign("sha256", Buffer.from(head), key))}`;
}

const now = () => Math.floor(Date.now() / 1000);
const valid = () => token({ iss: ISSUER, aud: AUDIENCE, sub: "alice", exp: now() + 600 });

/** A loopback port with nothing listening on it. */
async function closedPort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  const port = (s.address() as net.AddressInfo).port;
  await new Promise((r) => s.close(r));
  return port;
}

beforeAll(async () => {
  const jwksFile = join(dir, "jwks.json");
  writeFileSync(jwksFile, JSON.stringify({ keys: [{ ...keys.publicKey.export({ format: "jwk" }), kid: "k1", alg: "RS256", use: "sig" }] }));
  stack = await startTestStack(
    [
      { name: "llama", baseModel: "llama-3.1-8b", pods: [{ name: "llama-a" }] },
      { name: "ghost", baseModel: "ghost-7b", pods: [], extraEndpoints: [`127.0.0.1:${await closedPort()}`] },
    ],
    { jwt: { issuer: ISSUER, audiences: [AUDIENCE], jwksFile } },
  );
});

afterAll(async () => {
  await stack?.close();
  rmSync(dir, { recursive: true, force: true });
});

function client(apiKey: string) {
  return new OpenAI({ baseURL: `${stack.gatewayUrl}/v1`, apiKey, maxRetries: 0 });
}

const ask = { model: "llama-3.1-8b", messages: [{ role: "user" as const, content: "hi" }], max_tokens: 2 };

describe("JWT", () => {
  it("serves a request whose bearer token is a valid JWT (the OpenAI client's API key)", async () => {
    const r = await client(valid()).chat.completions.create(ask);
    expect(r.choices[0].message.content).toBeTruthy();
  });

  it.each([
    ["missing", null],
    ["signed by another key", () => token({ iss: ISSUER, aud: AUDIENCE, exp: now() + 600 }, stranger.privateKey)],
    // Envoy allows 60 s of clock skew.
    ["expired", () => token({ iss: ISSUER, aud: AUDIENCE, exp: now() - 3600 })],
    ["not a JWT", () => "sk-plain-api-key"],
  ])("refuses a token that is %s with 401 in OpenAI format", async (_name, make) => {
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (make) headers.authorization = `Bearer ${make()}`;
    const r = await fetch(`${stack.gatewayUrl}/v1/chat/completions`, { method: "POST", headers, body: JSON.stringify(ask) });
    expect(r.status).toBe(401);
    expect(r.headers.get("content-type")).toMatch(/application\/json/);
    const body = (await r.json()) as { error: { type: string; code: string; message: string } };
    expect(body.error.type).toBe("authentication_error");
    expect(body.error.message.length).toBeGreaterThan(0);
  });

  it("refuses a valid token for another audience with 403 in OpenAI format", async () => {
    const wrongAudience = token({ iss: ISSUER, aud: "someone-else", exp: now() + 600 });
    const err = await client(wrongAudience).chat.completions.create(ask).catch((e) => e);
    expect(err).toBeInstanceOf(OpenAI.PermissionDeniedError);
    expect(err.error).toMatchObject({ type: "permission_error", code: "forbidden" });
  });

  it("refuses a token without exp (requireExpiration's default) with 401 in OpenAI format", async () => {
    const err = await client(token({ iss: ISSUER, aud: AUDIENCE, sub: "alice" })).chat.completions.create(ask).catch((e) => e);
    expect(err).toBeInstanceOf(OpenAI.AuthenticationError);
    expect(err.error).toMatchObject({ type: "authentication_error", code: "invalid_token" });
  });

  it("takes no token from ?access_token= unless allowQueryToken is on", async () => {
    const r = await fetch(`${stack.gatewayUrl}/v1/chat/completions?access_token=${valid()}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(ask),
    });
    expect(r.status).toBe(401);
    expect(((await r.json()) as { error: { type: string } }).error.type).toBe("authentication_error");
  });

  it("leaves the readiness probe's GET /health open without a token", async () => {
    await waitFor("/health to answer 200 without a token", async () => (await fetch(`${stack.gatewayUrl}/health`)).status === 200);
    expect((await fetch(`${stack.gatewayUrl}/health?probe=1`)).status).toBe(200);
  });

  it.each(["/healthz", "/health/x", "/v1/models", "/metrics", "/"])("asks for a token on %s", async (path) => {
    const r = await fetch(`${stack.gatewayUrl}${path}`);
    expect(r.status).toBe(401);
    expect(((await r.json()) as { error: { type: string } }).error.type).toBe("authentication_error");
  });

  it("surfaces a 401 to the OpenAI client as AuthenticationError", async () => {
    const err = await client("sk-plain-api-key").chat.completions.create(ask).catch((e) => e);
    expect(err).toBeInstanceOf(OpenAI.AuthenticationError);
  });
});

describe("upstream failures", () => {
  it("answers a pod that refuses connections with 503 in OpenAI format", async () => {
    const err = await client(valid()).chat.completions.create({ ...ask, model: "ghost-7b" }).catch((e) => e);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect(err.status).toBe(503);
    expect(err.error).toMatchObject({ type: "upstream_error", code: "upstream_unavailable" });
  });

  it("leaves the filter's own errors untouched", async () => {
    const err = await client(valid()).chat.completions.create({ ...ask, model: "nope" }).catch((e) => e);
    expect(err.status).toBe(404);
    expect(err.code).toBe("model_not_found");
  });
});
