// Signing keys, tokens and an HTTPS server that serves their JWKS, with a CA
// made at test time (test/helpers/certs.ts), for the JWT tests.
import { generateKeyPairSync, sign, type KeyObject } from "node:crypto";
import { readFileSync } from "node:fs";
import https from "node:https";
import type { AddressInfo } from "node:net";
import { makeCa, makeServerCert } from "./certs.js";

export interface SigningKey {
  kid: string;
  privateKey: KeyObject;
  /** The public half as a JWKS entry. */
  jwk: Record<string, unknown>;
}

export function signingKey(kid: string): SigningKey {
  const { privateKey, publicKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
  return { kid, privateKey, jwk: { ...publicKey.export({ format: "jwk" }), kid, alg: "RS256", use: "sig" } };
}

const b64url = (value: object | Buffer) => (Buffer.isBuffer(value) ? value : Buffer.from(JSON.stringify(value))).toString("base64url");

/** An RS256 JWT with these claims, signed by `key`. */
export function signToken(claims: Record<string, unknown>, key: SigningKey): string {
  const head = `${b64url({ alg: "RS256", typ: "JWT", kid: key.kid })}.${b64url(claims)}`;
  return `${head}.${b64url(sign("sha256", Buffer.from(head), key.privateKey))}`;
}

export const jwksOf = (...keys: SigningKey[]) => JSON.stringify({ keys: keys.map((k) => k.jwk) });

/** A CA and a certificate for 127.0.0.1 signed by it, written into `dir`. */
export function makeLoopbackCert(dir: string): { caFile: string; certFile: string; keyFile: string } {
  const ca = makeCa(dir, "jwks");
  const server = makeServerCert(ca, dir, "jwks-server", ["127.0.0.1"]);
  return { caFile: ca.certFile, certFile: server.certFile, keyFile: server.keyFile };
}

export interface JwksServer {
  /** https://127.0.0.1:PORT/jwks.json */
  url: string;
  /** Serve this JWKS from now on. */
  serve(jwks: string): void;
  /** Requests for the JWKS so far. */
  fetches(): number;
  close(): Promise<void>;
}

export async function startJwksServer(cert: { certFile: string; keyFile: string }, jwks: string): Promise<JwksServer> {
  let body = jwks;
  let fetches = 0;
  const server = https.createServer({ cert: readFileSync(cert.certFile), key: readFileSync(cert.keyFile) }, (req, res) => {
    if (req.url !== "/jwks.json") {
      res.writeHead(404).end();
      return;
    }
    fetches++;
    res.writeHead(200, { "content-type": "application/json" }).end(body);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    url: `https://127.0.0.1:${(server.address() as AddressInfo).port}/jwks.json`,
    serve: (next) => {
      body = next;
    },
    fetches: () => fetches,
    close: () => new Promise((r) => {
      server.closeAllConnections();
      server.close(() => r());
    }),
  };
}
