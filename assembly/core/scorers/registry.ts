// Every scorer the picker runs, in the order it sums them and the decision
// header lists them. A new scorer is a folder beside these (its code with
// the formula, its test, its scorer.json for the config) and one line here.
import { PrefixIndex } from "../prefix/prefix-index";
import { KvCacheScorer } from "./kv-cache/kv-cache";
import { LoraScorer } from "./lora/lora";
import { PrefixScorer } from "./prefix/prefix";
import { QueueScorer } from "./queue/queue";
import { RunningScorer } from "./running/running";
import { Scorer } from "./scorer";

export function registeredScorers(prefixes: PrefixIndex): Scorer[] {
  return [
    new QueueScorer(),
    new KvCacheScorer(),
    new RunningScorer(),
    new LoraScorer(prefixes),
    new PrefixScorer(prefixes),
  ];
}
