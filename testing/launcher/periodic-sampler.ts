// Something sampled on a timer while a run goes on (the failover bench's
// cluster view, the soak's memory). One sample at a time: a slow answer
// delays the next one instead of piling requests up; stop() waits for the
// one under way and takes a last one, so the end of the run is in the record.
export abstract class PeriodicSampler<T> {
  readonly samples: T[] = [];
  private timer: NodeJS.Timeout | undefined;
  private inFlight: Promise<void> = Promise.resolve();

  constructor(private readonly intervalMs: number) {}

  /** Takes (and records) a sample now. */
  abstract sample(): Promise<T>;

  start(): void {
    this.timer = setInterval(() => {
      this.inFlight = this.inFlight.then(() => this.sample().then(() => {}, () => {}));
    }, this.intervalMs);
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.inFlight;
    await this.sample();
  }
}
