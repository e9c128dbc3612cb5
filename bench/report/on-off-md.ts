// BENCHMARKS.md's admission summary: ours with admission against the same
// policy with admission off, one row per scenario. A run of some scenarios
// refreshes their rows and keeps the others, so the table stays whole.
import { onOffTable, type OnOffRow } from "./admission-table.js";
import { blockContent, replaceBlock } from "./block.js";
import { markdownTable } from "./table.js";

const KEY = "admission:on-off";
const HEADING = "### Admission on and off";
const PRODUCED_BY = "Produced by `";
const INTRO =
  "Ours (the `latency` profile) with admission against without, every scenario: the 429s each gave, and the change of each TTFT percentile and of req/s with admission on; " +
  "each seed's value, seed 1 / 2 / 3 (one value where they agree). Where nothing overloads, the target is no 429 and no percentile moved by more than 1%.";

/**
 * From `rows` alone after a run of `every` scenario; otherwise the rows of the
 * scenarios run are replaced (or added, in name order) and the others kept,
 * with `command` named as the source of the refreshed ones.
 */
export function withOnOffRows(doc: string, rows: readonly OnOffRow[], command: string, every: boolean): string {
  const current = blockContent(doc, KEY);
  if (every || current === null) {
    return replaceBlock(doc, KEY, [INTRO, "", markdownTable(onOffTable(rows)), "", `${PRODUCED_BY}${command}\`.`].join("\n"), HEADING);
  }
  const old = current.split("\n");
  const table = markdownTable(onOffTable(rows)).split("\n");
  const [header, rule] = table;
  const scenarioOf = (line: string) => line.split("|")[1].trim();
  const byScenario = new Map<string, string>();
  for (const line of old.slice(old.indexOf(rule) + 1)) {
    if (!line.startsWith("| ")) break;
    byScenario.set(scenarioOf(line), line);
  }
  for (const line of table.slice(2)) byScenario.set(scenarioOf(line), line);
  const lines = [...byScenario.keys()].sort().map((k) => byScenario.get(k)!);
  // The whole table's source stays named; the refreshed rows' is added.
  const source = old.find((line) => line.startsWith(PRODUCED_BY));
  const produced = source ? source.slice(0, source.indexOf("`", PRODUCED_BY.length) + 1) : `${PRODUCED_BY}npm run bench -- --all\``;
  const footer = `${produced}; the ${rows.map((r) => r.scenario).join(", ")} rows by \`${command}\`.`;
  return replaceBlock(doc, KEY, [INTRO, "", header, rule, ...lines, "", footer].join("\n"));
}
