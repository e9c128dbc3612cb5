// Checks, before anything starts, that every port the stack will listen on is
// free, and turns bind failures into messages that name the config field.
import net from "node:net";
import { formatHostPort } from "./config.js";

/** One port the stack is about to listen on. */
export interface PortClaim {
  /** The config field it comes from, e.g. "gateway.port" or "aggregator.metricsPort". */
  part: string;
  /** The IP it binds to. */
  host: string;
  port: number;
}

export class PortUnavailableError extends Error {
  constructor(
    readonly claim: PortClaim,
    readonly code: string,
    detail?: string,
  ) {
    super(describe(claim, code, detail));
    this.name = "PortUnavailableError";
  }
}

function describe({ part, host, port }: PortClaim, code: string, detail?: string): string {
  switch (code) {
    case "EADDRINUSE":
      return `${part} ${port} is already in use on ${host} (is another gateway running?)`;
    case "EACCES":
      return `${part} ${port} on ${host}: permission denied (ports below 1024 need privileges)`;
    case "EADDRNOTAVAIL":
      return `${part} ${port}: cannot listen on ${host}, which is not an address of this machine`;
    default:
      return `${part} ${port} on ${host}: ${detail ?? code}`;
  }
}

const isWildcard = (host: string) => host === "0.0.0.0" || host === "::";

/** Two claims of the stack itself that would collide. */
function overlapping(a: PortClaim, b: PortClaim): boolean {
  return a.port === b.port && (a.host === b.host || isWildcard(a.host) || isWildcard(b.host));
}

/** Binds the port and releases it at once; rejects with the OS error code. */
function probe(claim: PortClaim): Promise<void> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once("error", reject);
    // Node never sets SO_REUSEPORT here, so an Envoy listener that has it
    // still makes this bind fail. exclusive: a real bind even in a cluster worker.
    server.listen({ host: claim.host, port: claim.port, exclusive: true }, () => server.close(() => resolve()));
  });
}

/**
 * Rejects with a PortUnavailableError for the first claim that cannot be
 * bound, or that another claim of the same stack also uses. Port 0 claims
 * (the OS picks) are skipped.
 */
export async function checkPortsFree(claims: PortClaim[]): Promise<void> {
  const fixed = claims.filter((c) => c.port !== 0);
  fixed.forEach((c, i) => {
    const earlier = fixed.slice(0, i).find((d) => overlapping(c, d));
    if (earlier) throw new PortUnavailableError(c, "DUPLICATE", `also used by ${earlier.part} (${formatHostPort(earlier.host, earlier.port)})`);
  });
  for (const claim of fixed) {
    try {
      await probe(claim);
    } catch (err) {
      const e = err as NodeJS.ErrnoException;
      throw new PortUnavailableError(claim, e.code ?? "ERROR", e.message);
    }
  }
}

/**
 * A bind that fails after the check (another process was faster, or a part
 * reports it only in text, like Envoy's "cannot bind '127.0.0.1:8080':
 * Address already in use") becomes a PortUnavailableError naming the claim;
 * any other error is returned unchanged.
 */
export function explainBindError(err: unknown, claims: PortClaim[]): unknown {
  if (!(err instanceof Error) || err instanceof PortUnavailableError) return err;
  const code = (err as NodeJS.ErrnoException).code;
  const lines = err.message.split("\n").filter((l) => code === "EADDRINUSE" || /EADDRINUSE|address already in use/i.test(l));
  for (const claim of claims) {
    if (claim.port === 0) continue;
    const portPattern = new RegExp(`[:\\]]${claim.port}(?!\\d)`);
    if (lines.some((l) => portPattern.test(l))) return new PortUnavailableError(claim, "EADDRINUSE");
  }
  return err;
}
