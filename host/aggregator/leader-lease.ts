// Leader election by a coordination.k8s.io/v1 Lease, as Kubernetes' own
// controllers do it: the holder renews the Lease every quarter of its
// duration; the others read it and take it once it has not changed for a
// whole duration (timed on their own clock, so clock skew between nodes does
// not matter), or at once when the holder released it or its gRPC port
// refuses connections (its process has ended: no need to wait the Lease out).
// Every write carries the resourceVersion read, so of two aggregators
// taking it at once one wins and the other is told 409 Conflict.
// A leader that has not renewed for three quarters of the duration stops
// serving before anyone may take over, so two never serve at once.
import type { CoordinationV1Api, KubeConfig, V1Lease } from "@kubernetes/client-node";
import type { LeaseElectionConfig } from "../config/leader-election.js";
import { loadKubeConfig } from "../discovery/kubernetes.js";
import type { Leadership, LeadershipOptions } from "./leadership.js";
import { probePeer } from "./peer-probe.js";

/** The holder's gRPC address, for the others to probe. */
export const ADDRESS_ANNOTATION = "llm-gateway.io/grpc-address";

const statusOf = (err: unknown): number | undefined => {
  const code = (err as { code?: unknown }).code;
  return typeof code === "number" ? code : undefined;
};

export async function leaseLeadership(
  cfg: LeaseElectionConfig,
  probeMs: number,
  opts: LeadershipOptions & { identity: string; kubeConfig?: KubeConfig },
): Promise<Leadership> {
  const client = await import("@kubernetes/client-node");
  const kubeConfig = opts.kubeConfig ?? (await loadKubeConfig(cfg.kubeconfig));
  const api: CoordinationV1Api = kubeConfig.makeApiClient(client.CoordinationV1Api);
  const { namespace, name } = cfg;
  const durationMs = cfg.durationS * 1000;
  const renewMs = durationMs / 4;
  const where = `Lease ${namespace}/${name}`;
  const listeners: Array<(leading: boolean) => void> = [];

  let lease: V1Lease | null = null;
  /** Date.now() when the Lease was last seen to change. */
  let changedAt = 0;
  /** Date.now() of this aggregator's last successful write as holder. */
  let heldAt = 0;
  let holding = false;
  let closed = false;
  let timer: NodeJS.Timeout | null = null;
  let lastReadMs = 0;

  const holder = () => lease?.spec?.holderIdentity || null;
  const holderAddress = () => lease?.metadata?.annotations?.[ADDRESS_ANNOTATION] ?? null;
  // Checked on every stream, not only by the timer: a leader frozen past its lease stops at once when it wakes.
  const leading = () => holding && Date.now() - heldAt < (durationMs * 3) / 4;

  function seen(next: V1Lease | null): void {
    if (next?.metadata?.resourceVersion !== lease?.metadata?.resourceVersion) changedAt = Date.now();
    lease = next;
  }

  function setHolding(next: boolean, why: string): void {
    if (next === holding) return;
    holding = next;
    opts.log(`${next ? "leading" : "standing by"}: ${why}`);
    for (const cb of listeners) cb(next);
  }

  async function read(): Promise<void> {
    try {
      seen(await api.readNamespacedLease({ name, namespace }));
    } catch (err) {
      if (statusOf(err) !== 404) throw err;
      seen(null);
    }
    lastReadMs = Date.now();
  }

  /** Writes the Lease with this aggregator as holder: taking it (`take`) or renewing it. */
  async function write(take: boolean): Promise<boolean> {
    const now = new client.V1MicroTime(Date.now());
    const previous = lease?.spec;
    const body: V1Lease = {
      apiVersion: "coordination.k8s.io/v1",
      kind: "Lease",
      metadata: {
        name,
        namespace,
        ...(lease?.metadata?.resourceVersion ? { resourceVersion: lease.metadata.resourceVersion } : {}),
        annotations: { ...lease?.metadata?.annotations, [ADDRESS_ANNOTATION]: opts.self },
      },
      spec: {
        holderIdentity: opts.identity,
        leaseDurationSeconds: cfg.durationS,
        acquireTime: take ? now : (previous?.acquireTime ?? now),
        renewTime: now,
        leaseTransitions: (previous?.leaseTransitions ?? 0) + (take && previous?.holderIdentity ? 1 : 0),
      },
    };
    try {
      seen(lease ? await api.replaceNamespacedLease({ name, namespace, body }) : await api.createNamespacedLease({ namespace, body }));
      heldAt = Date.now();
      return true;
    } catch (err) {
      // Someone else wrote it first: read who.
      if (statusOf(err) === 409) {
        await read();
        return false;
      }
      throw err;
    }
  }

  async function stepAsLeader(): Promise<void> {
    if (!leading()) {
      setHolding(false, `could not renew ${where} for ${Date.now() - heldAt} ms`);
      return;
    }
    if (await write(false)) return;
    if (holder() !== opts.identity) setHolding(false, `${where} is now held by ${holder() ?? "nobody"}`);
  }

  async function stepAsStandby(): Promise<void> {
    // The holder's port, probed every time; the Lease itself, read every renew period.
    const address = holderAddress();
    const gone = holder() !== null && address !== null && address !== opts.self && (await probePeer(address, probeMs)) === "refused";
    if (gone || Date.now() - lastReadMs >= renewMs) await read();
    const current = holder();
    const free = current === null || current === opts.identity;
    const expired = Date.now() - changedAt > durationMs;
    const dead = gone && holderAddress() === address;
    if (!(free || expired || dead)) return;
    const why = free ? `${where} was free` : dead ? `${current}'s port ${address} refuses connections` : `${current} let ${where} run out`;
    if (await write(true)) setHolding(true, why);
  }

  async function step(): Promise<void> {
    try {
      await (holding ? stepAsLeader() : stepAsStandby());
    } catch (err) {
      opts.log(`${where}: ${(err as Error).message}`);
      if (holding && !leading()) setHolding(false, `could not renew ${where} for ${Date.now() - heldAt} ms`);
    }
  }

  const loop = async () => {
    await step();
    if (!closed) timer = setTimeout(loop, holding ? renewMs : probeMs);
  };
  await read();
  await step();
  if (!holding) opts.log(`standing by: ${where} is held by ${holder()}`);
  timer = setTimeout(loop, holding ? renewMs : probeMs);

  return {
    leading,
    leader: () => (leading() ? opts.self : holderAddress()),
    onChange: (cb) => void listeners.push(cb),
    async close() {
      closed = true;
      if (timer) clearTimeout(timer);
      if (!holding) return;
      holding = false;
      // Released, so a standby takes over at its next look instead of waiting the Lease out.
      try {
        await api.replaceNamespacedLease({
          name,
          namespace,
          body: { ...lease!, spec: { ...lease!.spec, holderIdentity: "", leaseDurationSeconds: 1, renewTime: new client.V1MicroTime(Date.now()) } },
        });
        opts.log(`released ${where}`);
      } catch (err) {
        opts.log(`could not release ${where}: ${(err as Error).message}`);
      }
    },
  };
}
