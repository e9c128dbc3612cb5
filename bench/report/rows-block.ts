// A generated block of BENCHMARKS.md that holds one table over every
// scenario, its first column the scenario: the admission on-and-off summary
// and the live runs. A run of some scenarios replaces their rows and keeps
// the others', so the table stays whole.
import { blockContent, replaceBlock } from "./block.js";
import { markdownTable, type Table } from "./table.js";

export interface RowsBlock {
  key: string;
  heading: string;
  /** What the table is, said once above it. */
  intro: string;
}

const PRODUCED_BY = "Produced by `";
const cellsOf = (line: string) => line.slice(2, -2).split(" | ");

/**
 * From `table` alone after a run of `every` scenario; otherwise the rows of
 * the `scenarios` run are replaced by the table's (kept in name order) and
 * the others kept, each cell under the column of its name (n/a where an
 * older table had no such column), with `command` named as the source of
 * the refreshed rows.
 */
export function withScenarioRows(doc: string, block: RowsBlock, table: Table, command: string, every: boolean, scenarios = [...new Set(table.rows.map((r) => r[0]))]): string {
  const current = blockContent(doc, block.key);
  if (every || current === null) {
    return replaceBlock(doc, block.key, [block.intro, "", markdownTable(table), "", `${PRODUCED_BY}${command}\`.`].join("\n"), block.heading);
  }
  const old = current.split("\n");
  const start = old.findIndex((line) => line.startsWith("| "));
  const end = old.findIndex((line, i) => i > start + 1 && !line.startsWith("| "));
  const oldHeaders = start < 0 ? [] : cellsOf(old[start]);
  const kept = (start < 0 ? [] : old.slice(start + 2, end < 0 ? undefined : end))
    .map((line) => { const cells = cellsOf(line); return table.headers.map((h) => cells[oldHeaders.indexOf(h)] ?? "n/a"); })
    .filter((row) => !scenarios.includes(row[0]));
  // A stable sort: a scenario's rows keep their order.
  const rows = [...kept, ...table.rows].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  // The whole table's source stays named; the refreshed rows' is added.
  const source = old.find((line) => line.startsWith(PRODUCED_BY));
  const produced = source ? source.slice(0, source.indexOf("`", PRODUCED_BY.length) + 1) : `${PRODUCED_BY}npm run bench -- --all\``;
  const footer = produced === `${PRODUCED_BY}${command}\`` ? `${produced}.` : `${produced}; the ${scenarios.join(", ")} rows by \`${command}\`.`;
  return replaceBlock(doc, block.key, [block.intro, "", markdownTable({ ...table, rows }), "", footer].join("\n"));
}
