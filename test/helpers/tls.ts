// Test certificates in a temp folder removed by `remove()`, a fetch that
// trusts them, and a folder that swaps files as a Kubernetes Secret does.
import { certDir, issueLeaf, makeCa, writeLeaf } from "./certs.js";
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import https from "node:https";
import { Readable } from "node:stream";
import { join } from "node:path";

export interface Pem {
  certFile: string;
  keyFile: string;
  cert: string;
  key: string;
}

export interface TestCa extends Pem {
  /** A leaf certificate for `name` (also a SAN), with IP SAN 127.0.0.1, signed by this CA. */
  issue(name: string, usage: "server" | "client", file?: string): Pem;
}

/** A folder for certificates; `ca(name)` makes a self-signed CA in it (test/helpers/certs.ts does the signing). */
export function certificateFolder(): { dir: string; ca(name: string): TestCa; remove(): void } {
  const dir = certDir();
  let serial = 1;
  return {
    dir,
    remove: () => rmSync(dir, { recursive: true, force: true }),
    ca(name) {
      const ca = makeCa(dir, name);
      return {
        certFile: ca.certFile,
        keyFile: ca.keyFile,
        cert: ca.cert,
        key: readFileSync(ca.keyFile, "utf8"),
        issue(leaf, usage, file = `${name}-${leaf}-${serial++}`) {
          return writeLeaf(dir, file, issueLeaf(ca, { commonName: leaf, dnsNames: [leaf], ips: ["127.0.0.1"], usage }));
        },
      };
    },
  };
}

/**
 * A fetch over node:https with its own trust (and client certificate), for
 * the openai client's `fetch` option: Node 20's global fetch takes no CA.
 */
export function httpsFetch(opts: { ca: string; cert?: string; key?: string }): typeof fetch {
  const agent = new https.Agent({ ca: opts.ca, cert: opts.cert, key: opts.key, keepAlive: true });
  return (async (input: string | URL | Request, init: RequestInit = {}) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    const headers = new Headers(init.headers);
    const body = init.body == null ? undefined : typeof init.body === "string" ? init.body : Buffer.from(await new Response(init.body).arrayBuffer());
    return new Promise<Response>((resolve, reject) => {
      const req = https.request(url, { method: init.method ?? "GET", headers: Object.fromEntries(headers), agent }, (res) => {
        const out = new Headers();
        for (const [k, v] of Object.entries(res.headers)) if (v !== undefined) out.set(k, Array.isArray(v) ? v.join(", ") : v);
        const status = res.statusCode ?? 0;
        resolve(new Response(status === 204 || status === 304 ? null : (Readable.toWeb(res) as ReadableStream), { status, headers: out }));
      });
      req.on("error", reject);
      init.signal?.addEventListener("abort", () => req.destroy(new Error("aborted")));
      req.end(body);
    });
  }) as typeof fetch;
}

/**
 * A folder laid out as the kubelet lays out a Secret volume: each file is a
 * symlink through `..data`, which points at a timestamped folder; `publish`
 * writes a new folder and swaps `..data` in one rename.
 */
export function secretVolume(dir: string): { publish(files: Record<string, string>): void } {
  mkdirSync(dir, { recursive: true });
  let version = 0;
  return {
    publish(files) {
      const folder = `..v${++version}`;
      mkdirSync(join(dir, folder));
      for (const [name, content] of Object.entries(files)) writeFileSync(join(dir, folder, name), content);
      symlinkSync(folder, join(dir, "..data_tmp"));
      renameSync(join(dir, "..data_tmp"), join(dir, "..data"));
      for (const name of Object.keys(files)) if (!existsSync(join(dir, name))) symlinkSync(join("..data", name), join(dir, name));
    },
  };
}
