// Named weight sets for our filter ("profiles"), the one place they are
// defined. Each runs as its own policy, `ours:<name>`.
import type { ScorerWeights } from "../../host/config.js";

export interface Profile {
  name: string;
  description: string;
  weights: ScorerWeights;
}

export const PROFILES: readonly Profile[] = [
  {
    name: "default",
    description: "the gateway's default weights: queue 2, KV cache 2, running 1",
    weights: { queue: 2, kvCache: 2, running: 1, lora: 0, prefix: 0 },
  },
  {
    // The reference picker's weights minus the prefix scorer we do not have
    // yet: isolates what the prefix scorer and our snapshot path each change.
    name: "queue-kv",
    description: "queue 2, KV cache 2 (the reference picker's default without its prefix scorer)",
    weights: { queue: 2, kvCache: 2, running: 0, lora: 0, prefix: 0 },
  },
];
