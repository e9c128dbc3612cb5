// Named weight sets for our filter ("profiles"), the one place they are
// defined. Each runs as its own policy, `ours:<name>`.
import { DEFAULT_WEIGHTS, type ScorerWeights } from "../../host/config.js";

export interface Profile {
  name: string;
  description: string;
  weights: ScorerWeights;
}

const w = DEFAULT_WEIGHTS;

export const PROFILES: readonly Profile[] = [
  {
    name: "default",
    description: `the gateway's default weights: queue ${w.queue}, KV cache ${w.kvCache}, running ${w.running}, LoRA ${w.lora}, prefix ${w.prefix}`,
    weights: { ...DEFAULT_WEIGHTS },
  },
];
