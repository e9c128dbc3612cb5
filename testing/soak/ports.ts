// Ports for the soak's pods and its aggregator. A crashed pod must come back
// on its own port, so ports come from below Linux's ephemeral range
// (32768+), where no outgoing connection (Envoy's to the pods, ours to
// Envoy) is given one of them while its pod is down. Never the same port
// twice in a run: a pod that joins after another left is a different pod.
import { checkPortsFree } from "../../host/ports.js";

const FIRST = 20_000;
const SPAN = 10_000;
const ATTEMPTS = 100;

export class PortPicker {
  private readonly used = new Set<number>();

  async next(part: string): Promise<number> {
    for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
      const port = FIRST + Math.floor(Math.random() * SPAN);
      if (this.used.has(port)) continue;
      const free = await checkPortsFree([{ part, host: "127.0.0.1", port }]).then(() => true, () => false);
      if (!free) continue;
      this.used.add(port);
      return port;
    }
    throw new Error(`${part}: no free port in ${FIRST}-${FIRST + SPAN - 1} after ${ATTEMPTS} tries`);
  }
}
