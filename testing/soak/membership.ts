// Which pods each pool has. A join or a leave edits the config file, which
// the running aggregator watches and applies without a restart (hot
// reload), then waits until Envoy's pool cluster lists exactly the new set
// (the aggregator serves it over ADS), so the soak knows when a leaving pod
// can no longer be picked.
import { ClusterWatch } from "../launcher/envoy-watch.js";
import { soakConfigYaml, writeConfigFile } from "./gateway-config.js";

const APPLIED_TIMEOUT_MS = 20_000;
const POLL_MS = 100;

export interface MembershipOptions {
  configPath: string;
  aggregatorPort: number;
  // A function: Envoy starts after the first config file is written.
  envoyAdminUrl: () => string;
}

export class Membership {
  private readonly members = new Map<string, string[]>();

  constructor(private readonly opts: MembershipOptions) {}

  /** The pool's addresses, oldest member first. */
  of(pool: string): readonly string[] {
    return this.members.get(pool) ?? [];
  }

  /** The first config file, before the aggregator starts. */
  writeInitial(initial: ReadonlyMap<string, readonly string[]>): void {
    for (const [pool, addresses] of initial) this.members.set(pool, [...addresses]);
    writeConfigFile(this.opts.configPath, soakConfigYaml(this.opts.aggregatorPort, this.members));
  }

  async join(pool: string, address: string): Promise<void> {
    await this.change(pool, [...this.of(pool), address]);
  }

  async leave(pool: string, address: string): Promise<void> {
    await this.change(pool, this.of(pool).filter((a) => a !== address));
  }

  private async change(pool: string, addresses: string[]): Promise<void> {
    this.members.set(pool, addresses);
    writeConfigFile(this.opts.configPath, soakConfigYaml(this.opts.aggregatorPort, this.members));
    await this.untilEnvoyLists(pool, addresses);
  }

  private async untilEnvoyLists(pool: string, addresses: string[]): Promise<void> {
    const want = [...addresses].sort().join(",");
    const deadline = Date.now() + APPLIED_TIMEOUT_MS;
    let seen = "";
    while (Date.now() < deadline) {
      const sample = await new ClusterWatch(this.opts.envoyAdminUrl(), pool, () => 0).sample();
      seen = Object.keys(sample.hosts).sort().join(",");
      if (seen === want) return;
      await new Promise((r) => setTimeout(r, POLL_MS));
    }
    throw new Error(`Envoy's pool ${pool} lists [${seen}] ${APPLIED_TIMEOUT_MS} ms after the change to [${want}]`);
  }
}
