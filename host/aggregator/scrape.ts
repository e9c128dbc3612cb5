// Fetching a pod's Prometheus /metrics and parsing the text exposition format.
import http from "node:http";

/** One sample line: `name{label="value",...} value [timestamp]`. */
export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** vLLM's /metrics with histograms is ~100-300 KB; anything far beyond is not a model server. */
const MAX_BODY_BYTES = 8 * 1024 * 1024;

export interface ScrapeTarget {
  /** IP literal to connect to (no brackets). */
  ip: string;
  port: number;
  /** Host header: the endpoint as configured (may be a DNS name). */
  hostHeader: string;
}

/**
 * GET http://ip:port/metrics within `timeoutMs` (connect + whole body).
 * Use a keep-alive agent: at 20 scrapes/s per pod a new TCP connection per
 * scrape would cost more than the scrape itself.
 */
export function fetchMetrics(target: ScrapeTarget, timeoutMs: number, agent: http.Agent, signal?: AbortSignal): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: target.ip,
        port: target.port,
        path: "/metrics",
        method: "GET",
        agent,
        signal,
        headers: { host: target.hostHeader, accept: "text/plain" },
      },
      (res) => {
        if (res.statusCode !== 200) {
          res.resume();
          fail(new Error(`HTTP ${res.statusCode}`));
          return;
        }
        res.setEncoding("utf8");
        let body = "";
        res.on("data", (chunk: string) => {
          body += chunk;
          if (body.length > MAX_BODY_BYTES) req.destroy(new Error(`metrics body larger than ${MAX_BODY_BYTES} bytes`));
        });
        res.on("end", () => {
          clearTimeout(timer);
          resolve(body);
        });
        res.on("error", fail);
      },
    );
    const timer = setTimeout(() => req.destroy(new Error(`timed out after ${timeoutMs} ms`)), timeoutMs);
    function fail(err: Error): void {
      clearTimeout(timer);
      reject(err);
    }
    req.on("error", fail);
    req.end();
  });
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

/**
 * Parses one sample line; null when malformed. `want` is checked right after
 * the name so label parsing is only paid for metrics we use.
 */
function parseLine(line: string, want: ((name: string) => boolean) | undefined): Sample | null | undefined {
  let i = 0;
  const n = line.length;
  while (i < n && isSpace(line.charCodeAt(i))) i++;
  if (i === n || line.charCodeAt(i) === 35 /* # */) return undefined;
  const nameStart = i;
  if (!isNameStart(line.charCodeAt(i))) return null;
  while (i < n && isNameChar(line.charCodeAt(i))) i++;
  const name = line.slice(nameStart, i);
  if (want && !want(name)) return undefined;

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
 * Parses Prometheus text exposition (0.0.4, and the OpenMetrics subset model
 * servers emit). Comments, blank lines and malformed lines are skipped: one
 * odd line should not cost a whole scrape. `want` filters by metric name.
 */
export function parsePrometheusText(text: string, want?: (name: string) => boolean): Sample[] {
  const out: Sample[] = [];
  let start = 0;
  while (start < text.length) {
    let end = text.indexOf("\n", start);
    if (end < 0) end = text.length;
    let line = text.slice(start, end);
    if (line.endsWith("\r")) line = line.slice(0, -1);
    const sample = parseLine(line, want);
    if (sample) out.push(sample);
    start = end + 1;
  }
  return out;
}
