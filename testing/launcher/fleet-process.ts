// A fake fleet (testing/fakeserver's CLI) in a process of its own: its
// engines do not share an event loop with the load generator, and a SIGKILL
// is a real crash (the kernel closes its sockets, streams under way are cut).
// The live bench runs a scenario's whole fleet in one; the soak, each pod in
// its own, so that one can crash and come back on its address.
import { writeFileSync, type WriteStream } from "node:fs";
import { join } from "node:path";
import { projectRoot } from "../../host/paths.js";
import type { PodSpec } from "../fakeserver/index.js";
import { startNodeChild, type NodeChild } from "./node-child.js";

const FAKESERVER_MAIN = join(projectRoot, "dist", "testing", "fakeserver", "main.js");

export interface FleetProcess {
  readonly child: NodeChild;
  /** "127.0.0.1:port" by pod name. */
  readonly addresses: Map<string, string>;
}

export interface FleetProcessOptions {
  /** Where the pod list is written for the child to read. */
  specFile: string;
  name: string;
  /** Serve GET /admin/state and POST /admin/fault too. */
  admin?: boolean;
  log?: WriteStream;
}

/** Resolves once every pod listens. */
export async function startFleetProcess(pods: readonly PodSpec[], opts: FleetProcessOptions): Promise<FleetProcess> {
  writeFileSync(opts.specFile, JSON.stringify(pods));
  const addresses = new Map<string, string>();
  const child = await startNodeChild({
    args: [FAKESERVER_MAIN, "--pods", opts.specFile, ...(opts.admin ? ["--admin"] : [])],
    name: opts.name,
    log: opts.log,
    ready: /^fleet ready$/,
    onLine: (line) => {
      const pod = /^pod (\S+) \S+ http:\/\/(\S+)$/.exec(line);
      if (pod) addresses.set(pod[1], pod[2]);
    },
  });
  return { child, addresses };
}
