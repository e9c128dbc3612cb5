// JWT with a remote JWKS served over HTTPS (a CA made here): the key set is
// fetched before the listener opens, refreshed when its cache expires (a
// rotated key is accepted after that), plus query-string tokens when the
// config allows them and the configured clock skew.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { jwksOf, makeLoopbackCert, signingKey, signToken, startJwksServer, type JwksServer } from "../helpers/jwks-server.js";
import { startTestStack, waitFor, type TestStack } from "../helpers/stack.js";

const ISSUER = "https://auth.example.test";
const SKEW_S = 20;
const CACHE_S = 2;
const first = signingKey("k1");
const next = signingKey("k2");
const dir = mkdtempSync(join(tmpdir(), "gw-jwks-"));
let jwks: JwksServer;
let stack: TestStack;

const now = () => Math.floor(Date.now() / 1000);
const tokenBy = (key = first, claims: Record<string, unknown> = {}) => signToken({ iss: ISSUER, sub: "alice", exp: now() + 600, ...claims }, key);
const ask = { model: "llama-3.1-8b", messages: [{ role: "user" as const, content: "hi" }], max_tokens: 2 };

beforeAll(async () => {
  const cert = makeLoopbackCert(dir);
  jwks = await startJwksServer(cert, jwksOf(first));
  stack = await startTestStack([{ name: "llama", baseModel: "llama-3.1-8b", pods: [{ name: "llama-a" }] }], {
    jwt: { issuer: ISSUER, jwksUri: jwks.url, jwksCaFile: cert.caFile, jwksCacheDurationS: CACHE_S, clockSkewSeconds: SKEW_S, allowQueryToken: true },
  });
});

afterAll(async () => {
  await stack?.close();
  await jwks?.close();
  rmSync(dir, { recursive: true, force: true });
});

async function status(token: string | null, query = ""): Promise<number> {
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (token) headers.authorization = `Bearer ${token}`;
  const r = await fetch(`${stack.gatewayUrl}/v1/chat/completions${query}`, { method: "POST", headers, body: JSON.stringify(ask) });
  await r.arrayBuffer();
  return r.status;
}

describe("remote JWKS over HTTPS", () => {
  it("has the key set before the first request: a valid token is served at once", async () => {
    expect(jwks.fetches()).toBeGreaterThan(0);
    const client = new OpenAI({ baseURL: `${stack.gatewayUrl}/v1`, apiKey: tokenBy(), maxRetries: 0 });
    const r = await client.chat.completions.create(ask);
    expect(r.choices[0].message.content).toBeTruthy();
  });

  it("takes a token from ?access_token= when allowQueryToken is on", async () => {
    expect(await status(null, `?access_token=${tokenBy()}`)).toBe(200);
  });

  it("honours the configured clock skew", async () => {
    expect(await status(tokenBy(first, { exp: now() - SKEW_S / 2 }))).toBe(200);
    expect(await status(tokenBy(first, { exp: now() - SKEW_S * 3 }))).toBe(401);
    expect(await status(tokenBy(first, { nbf: now() + SKEW_S / 2 }))).toBe(200);
    expect(await status(tokenBy(first, { nbf: now() + SKEW_S * 3 }))).toBe(401);
  });

  it("accepts a rotated key once the cache is refreshed, and no longer the retired one", async () => {
    expect(await status(tokenBy(next))).toBe(401);
    const before = jwks.fetches();
    jwks.serve(jwksOf(next));
    await waitFor("a token signed by the new key to be accepted", async () => (await status(tokenBy(next))) === 200, CACHE_S * 1000 * 5);
    expect(jwks.fetches()).toBeGreaterThan(before);
    expect(await status(tokenBy(first))).toBe(401);
  });
});
