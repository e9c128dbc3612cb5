// Test certificates made at test time with openssl (no key is ever
// committed): a CA, and leaf certificates it signs for a server (with DNS
// and IP SANs) or a client. Each file lands in the folder given; write a new
// pair over an old one with `writeLeaf` to rotate it.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export interface CertificateAuthority {
  name: string;
  certFile: string;
  keyFile: string;
  /** The CA certificate's PEM text. */
  cert: string;
}

export interface Leaf {
  certFile: string;
  keyFile: string;
  cert: string;
  key: string;
}

export interface LeafOptions {
  commonName: string;
  /** Subject alternative names: DNS names. */
  dnsNames?: string[];
  /** Subject alternative names: IP addresses. */
  ips?: string[];
  /** serverAuth (default) or clientAuth extended key usage. */
  usage?: "server" | "client";
  days?: number;
}

function openssl(args: string[], cwd: string): void {
  execFileSync("openssl", args, { cwd, stdio: ["ignore", "ignore", "pipe"] });
}

/** A temporary folder for a test's certificates. */
export function certDir(prefix = "llm-gateway-certs-"): string {
  return mkdtempSync(join(tmpdir(), prefix));
}

/** A self-signed CA (EC P-256) in `dir`, as `<name>-ca.pem` and `<name>-ca.key`. */
export function makeCa(dir: string, name = "test"): CertificateAuthority {
  const certFile = join(dir, `${name}-ca.pem`);
  const keyFile = join(dir, `${name}-ca.key`);
  openssl(
    ["req", "-x509", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", keyFile, "-out", certFile,
      "-days", "2", "-subj", `/CN=${name} test CA`, "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
    dir,
  );
  return { name, certFile, keyFile, cert: readFileSync(certFile, "utf8") };
}

/** A certificate and key signed by `ca`, as PEM text (nothing written). */
export function issueLeaf(ca: CertificateAuthority, opts: LeafOptions): { cert: string; key: string } {
  const work = certDir("llm-gateway-leaf-");
  const san = [...(opts.dnsNames ?? []).map((d) => `DNS:${d}`), ...(opts.ips ?? []).map((ip) => `IP:${ip}`)];
  const ext = [
    "basicConstraints=critical,CA:FALSE",
    "keyUsage=critical,digitalSignature,keyEncipherment",
    `extendedKeyUsage=${opts.usage === "client" ? "clientAuth" : "serverAuth"}`,
    ...(san.length > 0 ? [`subjectAltName=${san.join(",")}`] : []),
  ];
  writeFileSync(join(work, "ext.cnf"), `${ext.join("\n")}\n`);
  openssl(["req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "leaf.key", "-out", "leaf.csr", "-subj", `/CN=${opts.commonName}`], work);
  openssl(
    ["x509", "-req", "-in", "leaf.csr", "-CA", ca.certFile, "-CAkey", ca.keyFile, "-CAcreateserial", "-out", "leaf.pem", "-days", String(opts.days ?? 2), "-extfile", "ext.cnf"],
    work,
  );
  return { cert: readFileSync(join(work, "leaf.pem"), "utf8"), key: readFileSync(join(work, "leaf.key"), "utf8") };
}

/**
 * Writes a pair as `<name>.pem` and `<name>.key` in `dir`, each by rename so a
 * watcher never reads half a file; writing again over the same name rotates it.
 */
export function writeLeaf(dir: string, name: string, pair: { cert: string; key: string }): Leaf {
  const certFile = join(dir, `${name}.pem`);
  const keyFile = join(dir, `${name}.key`);
  for (const [file, text] of [[keyFile, pair.key], [certFile, pair.cert]] as const) {
    writeFileSync(`${file}.tmp`, text, { mode: 0o600 });
    renameSync(`${file}.tmp`, file);
  }
  return { certFile, keyFile, ...pair };
}

/** A server certificate for `names` (IP literals become IP SANs, the rest DNS SANs), written to `dir`. */
export function makeServerCert(ca: CertificateAuthority, dir: string, name: string, names: string[]): Leaf {
  const ips = names.filter((n) => /^[\d.]+$|:/.test(n));
  const dnsNames = names.filter((n) => !ips.includes(n));
  return writeLeaf(dir, name, issueLeaf(ca, { commonName: names[0] ?? name, dnsNames, ips, usage: "server" }));
}

/** A client certificate with common name `commonName`, written to `dir`. */
export function makeClientCert(ca: CertificateAuthority, dir: string, name: string, commonName = name): Leaf {
  return writeLeaf(dir, name, issueLeaf(ca, { commonName, usage: "client" }));
}
