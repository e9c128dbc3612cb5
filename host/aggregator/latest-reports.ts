/**
 * Each sharing Envoy's latest report of one kind, for merges that send
 * every Envoy the others' state whenever some other Envoy's changed (queue
 * boards, ejections): a version bumped on every report and leave, and per
 * Envoy the version it was last sent.
 */
export class LatestReports<T> {
  private members = new Map<string, { value: T; told: number }>();
  private version = 0;

  get(envoy: string): T | undefined {
    return this.members.get(envoy)?.value;
  }

  values(): T[] {
    return [...this.members.values()].map((m) => m.value);
  }

  /** `envoy`'s new report (joining it on its first). */
  set(envoy: string, value: T): void {
    const m = this.members.get(envoy);
    if (m) m.value = value;
    else this.members.set(envoy, { value, told: -1 });
    this.version++;
  }

  forget(envoy: string): void {
    if (this.members.delete(envoy)) this.version++;
  }

  /** The others' reports for `envoy` when something changed since it was last sent them; undefined otherwise, or when it never reported. */
  othersIfChanged(envoy: string): T[] | undefined {
    const m = this.members.get(envoy);
    if (!m || m.told === this.version) return undefined;
    m.told = this.version;
    const others: T[] = [];
    for (const [key, other] of this.members) if (key !== envoy) others.push(other.value);
    return others;
  }
}
