// A real Kubernetes API server (kube-apiserver 1.20.2 + etcd) on loopback for
// tests, the soak and local trials: no kubelet or scheduler, so Pods are only
// stored and a caller sets their status (podIP, Ready) itself. The binaries
// come from scripts/kube/build-apiserver.sh (Debian's own source packages,
// cached under ~/.cache/kube-local). Authentication is a static token file:
// an admin in system:masters plus any users a caller names, so a test can act
// as a ServiceAccount ("system:serviceaccount:<ns>:<name>") and RBAC decides.
import { KubeConfig } from "@kubernetes/client-node";
import { spawn, type ChildProcess } from "node:child_process";
import { generateKeyPairSync, randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import https from "node:https";
import net from "node:net";
import { homedir, tmpdir } from "node:os";
import { join } from "node:path";

export interface LocalApiServerUser {
  name: string;
  groups?: string[];
}

export interface LocalApiServerOptions {
  /** Token users besides the admin; RBAC bindings decide what they may do. */
  users?: LocalApiServerUser[];
  log?: (line: string) => void;
  /** How long to wait for /readyz (cold start is ~9 s on 2 cores). */
  readyTimeoutMs?: number;
}

export interface LocalApiServer {
  /** https://127.0.0.1:<port> (self-signed: clients skip TLS verification). */
  url: string;
  adminToken: string;
  tokenOf(user: string): string;
  /** A client config acting as `user` (default: the admin). */
  kubeConfig(user?: string): KubeConfig;
  /** Writes a kubeconfig file for kubectl acting as `user`; returns its path. */
  writeKubeconfig(user?: string): string;
  /**
   * Stops kube-apiserver and starts it again on the same port, etcd (and so
   * every object) kept: open watches break, and the new server's watch cache
   * begins at etcd's current revision, so older resourceVersions get 410 Gone.
   */
  restartApiServer(): Promise<void>;
  stop(): Promise<void>;
}

export interface ApiServerBinaries {
  etcd: string;
  apiserver: string;
}

const ADMIN = "admin";

/** Where scripts/kube/build-apiserver.sh puts the binaries (PREFIX, default ~/.cache/kube-local). */
export function apiServerBinaries(prefix = process.env.KUBE_LOCAL_PREFIX ?? join(homedir(), ".cache", "kube-local")): ApiServerBinaries | null {
  const bin = join(prefix, "bin");
  const found = { etcd: join(bin, "etcd"), apiserver: join(bin, "kube-apiserver") };
  return existsSync(found.etcd) && existsSync(found.apiserver) ? found : null;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/** One line of kube-apiserver's --token-auth-file: token,user,uid,"group1,group2". */
function tokenLine(token: string, user: string, uid: number, groups: string[]): string {
  return `${token},${user},${uid}` + (groups.length ? `,"${groups.join(",")}"` : "");
}

/** A ServiceAccount user is in its namespace's groups, as a real token would make it. */
function defaultGroups(user: string): string[] {
  const sa = /^system:serviceaccount:([^:]+):/.exec(user);
  return sa ? ["system:serviceaccounts", `system:serviceaccounts:${sa[1]}`] : [];
}

function getReady(url: string, token: string): Promise<boolean> {
  return new Promise((resolve) => {
    const req = https.get(`${url}/readyz`, { headers: { authorization: `Bearer ${token}` }, rejectUnauthorized: false, timeout: 2000 }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on("error", () => resolve(false));
    req.on("timeout", () => req.destroy());
  });
}

function exited(child: ChildProcess): Promise<void> {
  return child.exitCode !== null || child.signalCode !== null ? Promise.resolve() : new Promise((resolve) => child.once("exit", () => resolve()));
}

async function stopProcess(child: ChildProcess, graceMs = 5000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
  await exited(child);
  clearTimeout(timer);
}

/** Thrown when another process took a port between our probe and etcd's or kube-apiserver's bind. */
class PortRaceError extends Error {}

const START_ATTEMPTS = 3;

export async function startLocalApiServer(opts: LocalApiServerOptions = {}): Promise<LocalApiServer> {
  const bins = apiServerBinaries();
  if (!bins) throw new Error("kube-apiserver is not built: run scripts/kube/build-apiserver.sh (about 10 minutes cold)");
  // A probed free port is only free until someone else binds it; new ports on a lost race.
  for (let attempt = 1; ; attempt++) {
    try {
      return await startOnce(bins, opts);
    } catch (err) {
      if (!(err instanceof PortRaceError) || attempt === START_ATTEMPTS) throw err;
      opts.log?.(`local kube-apiserver: ${err.message.split("\n").at(-1)}; retrying on new ports`);
    }
  }
}

async function startOnce(bins: ApiServerBinaries, opts: LocalApiServerOptions): Promise<LocalApiServer> {
  const log = opts.log ?? (() => {});
  const dir = mkdtempSync(join(tmpdir(), "localkube-"));
  const [etcdClient, etcdPeer, securePort] = [await freePort(), await freePort(), await freePort()];

  const tokens = new Map<string, string>([[ADMIN, randomBytes(16).toString("hex")]]);
  const lines = [tokenLine(tokens.get(ADMIN)!, ADMIN, 1, ["system:masters"])];
  (opts.users ?? []).forEach((u, i) => {
    const token = randomBytes(16).toString("hex");
    tokens.set(u.name, token);
    lines.push(tokenLine(token, u.name, 100 + i, u.groups ?? defaultGroups(u.name)));
  });
  writeFileSync(join(dir, "tokens.csv"), lines.join("\n") + "\n", { mode: 0o600 });
  const { publicKey, privateKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
  writeFileSync(join(dir, "sa.pub"), publicKey.export({ type: "spki", format: "pem" }));
  writeFileSync(join(dir, "sa.key"), privateKey.export({ type: "pkcs8", format: "pem" }), { mode: 0o600 });

  const children: ChildProcess[] = [];
  const launch = (name: string, cmd: string, args: string[]) => {
    const child = spawn(cmd, args, { stdio: ["ignore", "ignore", "pipe"] });
    let tail = "";
    child.stderr!.on("data", (chunk: Buffer) => {
      tail = (tail + chunk.toString()).slice(-4000);
    });
    child.once("exit", (code, signal) => log(`${name} exited (${signal ?? code})`));
    children.push(child);
    return { child, tail: () => tail };
  };
  const stopAll = async () => {
    // The API server first: it would log etcd errors while etcd goes away.
    for (const child of [...children].reverse()) await stopProcess(child);
    rmSync(dir, { recursive: true, force: true });
  };

  const etcdUrl = `http://127.0.0.1:${etcdClient}`;
  const peerUrl = `http://127.0.0.1:${etcdPeer}`;
  const etcd = launch("etcd", bins.etcd, [
    "--data-dir", join(dir, "etcd"),
    "--listen-client-urls", etcdUrl, "--advertise-client-urls", etcdUrl,
    "--listen-peer-urls", peerUrl, "--initial-advertise-peer-urls", peerUrl,
    "--initial-cluster", `default=${peerUrl}`,
  ]);
  const apiserverArgs = [
    `--etcd-servers=${etcdUrl}`,
    "--bind-address=127.0.0.1",
    "--advertise-address=127.0.0.1",
    `--secure-port=${securePort}`,
    // 1.20 still opens an unauthenticated port 8080 unless told not to.
    "--insecure-port=0",
    `--cert-dir=${join(dir, "certs")}`,
    `--token-auth-file=${join(dir, "tokens.csv")}`,
    "--authorization-mode=RBAC",
    "--service-account-issuer=https://kubernetes.default.svc",
    `--service-account-key-file=${join(dir, "sa.pub")}`,
    `--service-account-signing-key-file=${join(dir, "sa.key")}`,
    "--service-cluster-ip-range=10.96.0.0/16",
    // No controller manager creates the default ServiceAccounts this plugin waits for.
    "--disable-admission-plugins=ServiceAccount",
  ];
  let apiserver = launch("kube-apiserver", bins.apiserver, apiserverArgs);

  const url = `https://127.0.0.1:${securePort}`;
  const untilReady = async () => {
    const deadline = Date.now() + (opts.readyTimeoutMs ?? 60_000);
    while (!(await getReady(url, tokens.get(ADMIN)!))) {
      const dead = [etcd, apiserver].find((p) => p.child.exitCode !== null || p.child.signalCode !== null);
      if (dead || Date.now() > deadline) {
        const why = dead ? `exited early:\n${dead.tail()}` : `not ready after ${opts.readyTimeoutMs ?? 60_000} ms:\n${apiserver.tail()}`;
        await stopAll();
        const raced = dead !== undefined && /address already in use/i.test(dead.tail());
        throw new (raced ? PortRaceError : Error)(`local kube-apiserver ${why.trimEnd()}`);
      }
      await new Promise((r) => setTimeout(r, 250));
    }
    log(`kube-apiserver ready at ${url}`);
  };
  await untilReady();

  const tokenOf = (user: string) => {
    const token = tokens.get(user);
    if (token === undefined) throw new Error(`no token user ${user}: pass it in startLocalApiServer({ users })`);
    return token;
  };
  const kubeConfig = (user = ADMIN) => {
    const kc = new KubeConfig();
    kc.loadFromOptions({
      clusters: [{ name: "local", server: url, skipTLSVerify: true }],
      users: [{ name: user, token: tokenOf(user) }],
      contexts: [{ name: "local", cluster: "local", user }],
      currentContext: "local",
    });
    return kc;
  };
  let stopped: Promise<void> | null = null;
  return {
    url,
    adminToken: tokens.get(ADMIN)!,
    tokenOf,
    kubeConfig,
    writeKubeconfig(user = ADMIN) {
      const path = join(dir, `kubeconfig-${user.replace(/[^A-Za-z0-9_.-]/g, "_")}`);
      writeFileSync(path, kubeConfig(user).exportConfig(), { mode: 0o600 });
      return path;
    },
    async restartApiServer() {
      await stopProcess(apiserver.child);
      children.splice(children.indexOf(apiserver.child), 1);
      apiserver = launch("kube-apiserver", bins.apiserver, apiserverArgs);
      await untilReady();
    },
    stop: () => (stopped ??= stopAll()),
  };
}
