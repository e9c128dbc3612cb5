// Parsing the Prometheus text exposition format. A model server's page is
// tens of KB, mostly histogram buckets the aggregator does not read: lines
// are found and their names compared as bytes, and only the wanted ones are
// decoded and parsed.

/** One sample line: `name{label="value",...} value [timestamp]`. */
export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

const isNameStart = (c: number) => (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c === 95 || c === 58; // A-Z a-z _ :
const isNameChar = (c: number) => isNameStart(c) || (c >= 48 && c <= 57);
const isSpace = (c: number) => c === 32 || c === 9;

function parseValue(token: string): number | null {
  switch (token) {
    case "+Inf":
    case "Inf":
      return Infinity;
    case "-Inf":
      return -Infinity;
    case "NaN":
      return NaN;
  }
  if (token === "") return null;
  const v = Number(token);
  return Number.isNaN(v) ? null : v;
}

/** Parses one sample line that starts with a metric name; null when malformed. */
function parseLine(line: string): Sample | null {
  const n = line.length;
  let i = 0;
  while (i < n && isNameChar(line.charCodeAt(i))) i++;
  const name = line.slice(0, i);

  const labels: Record<string, string> = {};
  if (line.charCodeAt(i) === 123 /* { */) {
    i++;
    for (;;) {
      while (i < n && isSpace(line.charCodeAt(i))) i++;
      if (line.charCodeAt(i) === 125 /* } */) {
        i++;
        break;
      }
      const ls = i;
      while (i < n && isNameChar(line.charCodeAt(i))) i++;
      if (i === ls) return null;
      const label = line.slice(ls, i);
      while (i < n && isSpace(line.charCodeAt(i))) i++;
      if (line.charCodeAt(i) !== 61 /* = */) return null;
      i++;
      while (i < n && isSpace(line.charCodeAt(i))) i++;
      if (line.charCodeAt(i) !== 34 /* " */) return null;
      i++;
      let value = "";
      let segment = i;
      for (;;) {
        if (i >= n) return null;
        const c = line.charCodeAt(i);
        if (c === 34) break;
        if (c === 92 /* \ */) {
          value += line.slice(segment, i);
          const e = line[i + 1];
          value += e === "n" ? "\n" : e === undefined ? "" : e; // \\ and \" keep the char
          i += 2;
          segment = i;
          continue;
        }
        i++;
      }
      value += line.slice(segment, i);
      i++; // closing quote
      labels[label] = value;
      while (i < n && isSpace(line.charCodeAt(i))) i++;
      const c = line.charCodeAt(i);
      if (c === 44 /* , */) i++; // also allows OpenMetrics' trailing comma
      else if (c !== 125) return null;
    }
  }
  while (i < n && isSpace(line.charCodeAt(i))) i++;
  const vs = i;
  while (i < n && !isSpace(line.charCodeAt(i))) i++;
  const value = parseValue(line.slice(vs, i));
  // Anything after the value is an optional timestamp, which we do not need.
  return value === null ? null : { name, labels, value };
}

/**
 * For a line at body[start, end) that is no comment: where its metric name
 * ends if it is a name to parse, else -1.
 */
type NameFilter = (body: Buffer, start: number, end: number) => number;

/**
 * Every sample line whose name passes `accept`. Comments, blank lines and
 * malformed lines are skipped: one odd line should not cost a whole scrape.
 */
function scan(body: Buffer, accept: NameFilter): Sample[] {
  const out: Sample[] = [];
  const n = body.length;
  let start = 0;
  while (start < n) {
    let end = body.indexOf(10 /* \n */, start);
    if (end < 0) end = n;
    if (body[start] !== 35 /* # */) {
      let nameStart = start;
      while (nameStart < end && isSpace(body[nameStart])) nameStart++;
      const nameEnd = nameStart < end ? accept(body, nameStart, end) : -1;
      if (nameEnd > nameStart) {
        const sample = parseLine(body.toString("utf8", nameStart, body[end - 1] === 13 /* \r */ ? end - 1 : end));
        if (sample) out.push(sample);
      }
    }
    start = end + 1;
  }
  return out;
}

const isNameEnd = (c: number) => c === 123 /* { */ || isSpace(c);

function sameBytes(body: Buffer, start: number, name: Buffer): boolean {
  // From the end: wanted names differ from their neighbours in their suffix (_sum, _count, _bucket).
  for (let k = name.length - 1; k >= 0; k--) if (body[start + k] !== name[k]) return false;
  return true;
}

/**
 * The filter for a set of names, which never walks a line's name byte by
 * byte: for each length a wanted name has, one byte tells whether the line's
 * name could end there, and only then are the bytes compared. Most lines
 * cost a few byte reads.
 */
const filters = new WeakMap<ReadonlySet<string>, NameFilter>();
function namesFilter(names: ReadonlySet<string>): NameFilter {
  let filter = filters.get(names);
  if (filter) return filter;
  const byLength = new Map<number, Buffer[]>();
  for (const name of names) {
    const bytes = Buffer.from(name, "latin1");
    byLength.set(bytes.length, [...(byLength.get(bytes.length) ?? []), bytes]);
  }
  const lengths = [...byLength.keys()];
  const candidates = [...byLength.values()];
  // Indexed loops: this runs for every line of every page.
  filter = (body, start, end) => {
    for (let g = 0; g < lengths.length; g++) {
      const after = start + lengths[g];
      if (after >= end || !isNameEnd(body[after])) continue;
      const group = candidates[g];
      for (let c = 0; c < group.length; c++) if (sameBytes(body, start, group[c])) return after;
    }
    return -1;
  };
  filters.set(names, filter);
  return filter;
}

/** Any name `want` accepts (all when absent): the general path, one name decoded per line. */
function predicateFilter(want: ((name: string) => boolean) | undefined): NameFilter {
  return (body, start, end) => {
    if (!isNameStart(body[start])) return -1;
    let i = start + 1;
    while (i < end && isNameChar(body[i])) i++;
    return !want || want(body.toString("latin1", start, i)) ? i : -1;
  };
}

/** The samples of the metrics named in `names`, from a scraped body (the aggregator's path). */
export function parseMetrics(body: Buffer, names: ReadonlySet<string>): Sample[] {
  return scan(body, namesFilter(names));
}

/**
 * Parses Prometheus text exposition (0.0.4, and the OpenMetrics subset model
 * servers emit); `want` filters by metric name.
 */
export function parsePrometheusText(text: string, want?: (name: string) => boolean): Sample[] {
  return scan(Buffer.from(text, "utf8"), predicateFilter(want));
}
