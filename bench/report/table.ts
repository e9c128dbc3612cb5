// Tables as Markdown or aligned console text, and the cell formats the
// bench's tables share.

export interface Table {
  headers: string[];
  /** Right-align these columns. */
  numeric: boolean[];
  rows: string[][];
}

/** 232 ms, 1.41 s, 177.6 s. */
export function formatMs(ms: number | undefined): string {
  if (ms === undefined) return "n/a";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 10_000) return `${(ms / 1000).toFixed(2)} s`;
  return `${(ms / 1000).toFixed(1)} s`;
}

export const percent = (x: number) => `${(x * 100).toFixed(0)}%`;

/** A share where a whole percent would hide what matters near 0 and 100: "99.6%", "0.4%", "0", "100%". */
export function percentOf(x: number): string {
  if (x === 0) return "0";
  if (x === 1) return "100%";
  const pct = x * 100;
  return `${pct < 1 || pct > 99 ? pct.toFixed(1) : pct.toFixed(0)}%`;
}

/** Header, right-aligned or not, and the cell of one row. */
export type Column<T> = [string, boolean, (row: T) => string];

export function tableOf<T>(columns: readonly Column<T>[], rows: readonly T[]): Table {
  return {
    headers: columns.map((c) => c[0]),
    numeric: columns.map((c) => c[1]),
    rows: rows.map((r) => columns.map((c) => c[2](r))),
  };
}

export function markdownTable(t: Table): string {
  const line = (cells: string[]) => `| ${cells.join(" | ")} |`;
  const rule = t.numeric.map((n) => (n ? "---:" : "---"));
  return [line(t.headers), line(rule), ...t.rows.map(line)].join("\n");
}

export function consoleTable(t: Table): string {
  const widths = t.headers.map((h, i) => Math.max(h.length, ...t.rows.map((r) => r[i].length)));
  const pad = (cells: string[]) => cells.map((c, i) => (t.numeric[i] ? c.padStart(widths[i]) : c.padEnd(widths[i]))).join("  ");
  return [pad(t.headers), widths.map((w) => "-".repeat(w)).join("  "), ...t.rows.map(pad)].join("\n");
}
