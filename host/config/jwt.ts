// gateway.jwt: who may call the gateway, checked by Envoy's jwt_authn.
import * as z from "zod";
import { msg } from "../validation.js";

export interface JwtConfig {
  issuer: string;
  /** Accepted `aud` values; empty accepts any audience. */
  audiences: string[];
  /** A JWKS file read when Envoy starts; a relative path is resolved against the config file's folder. */
  jwksFile?: string;
  /** An https URL serving the JWKS, fetched before the listener opens and again before the cache expires. */
  jwksUri?: string;
  /** How long a fetched JWKS is used before it is fetched again. */
  jwksCacheDurationS: number;
  /** CA bundle (PEM) the JWKS server's certificate must chain to; a relative path is resolved like jwksFile. */
  jwksCaFile: string;
  /** Refuse a token without `exp`. */
  requireExpiration: boolean;
  /** Leeway for `exp` and `nbf` against clocks that disagree. */
  clockSkewSeconds: number;
  /** Also take the token from `?access_token=` (it then lands in access logs and browser history). */
  allowQueryToken: boolean;
}

/** Where Debian and Envoy's images keep the system CA bundle. */
export const SYSTEM_CA_FILE = "/etc/ssl/certs/ca-certificates.crt";

const JWKS_URI_TEXT = "expected an https:// URL of a JWKS";
const isHttpsUrl = (v: unknown) => {
  if (typeof v !== "string") return false;
  try {
    const u = new URL(v);
    return u.protocol === "https:" && u.hostname !== "" && u.username === "" && u.password === "";
  } catch {
    return false;
  }
};
const text = (what: string) => z.string({ error: msg(what) }).min(1, { error: what });

export const jwtSchema = z
  .strictObject({
    issuer: text("expected the token issuer (iss)"),
    audiences: z.array(z.string().min(1), { error: msg("expected a list of audiences") }).default([]),
    jwksFile: text("expected the path of a JWKS file").optional(),
    jwksUri: z.string({ error: msg(JWKS_URI_TEXT) }).refine(isHttpsUrl, { error: JWKS_URI_TEXT }).optional(),
    jwksCacheDurationS: z.number().int().min(1).max(86_400).default(300),
    jwksCaFile: text("expected the path of a PEM CA bundle").default(SYSTEM_CA_FILE),
    requireExpiration: z.boolean({ error: msg("expected true or false") }).default(true),
    clockSkewSeconds: z.number().int().min(0).max(600).default(60),
    allowQueryToken: z.boolean({ error: msg("expected true or false") }).default(false),
  })
  .superRefine((jwt, ctx) => {
    if ((jwt.jwksFile === undefined) === (jwt.jwksUri === undefined)) {
      ctx.addIssue({ code: "custom", path: ["jwksFile"], message: "expected exactly one of jwksFile and jwksUri" });
    }
  });
