// The docs that are checked mechanically: the generated configuration
// reference must match the schema it was rendered from, the README's config
// example must be a valid config, and no relative link in README.md or docs/
// may point at a file or heading that is gone (the manual moved out of the
// README once; links into it are the first thing to break on the next move).
import { readdirSync, readFileSync, existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { parseGatewayConfig } from "../../host/config.js";
// @ts-expect-error: a plain .mjs script without type declarations
import { BEGIN, END, REFERENCE_PATH, render } from "../../scripts/docs/config-reference.mjs";

const root = fileURLToPath(new URL("../..", import.meta.url));
const read = (path: string) => readFileSync(path, "utf8");

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces as dashes. */
const slug = (heading: string) =>
  heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, "")
    .replace(/\s/g, "-");

/** Anchors of a Markdown file's headings (outside code fences). */
function anchors(text: string): Set<string> {
  const out = new Set<string>();
  let fence = false;
  for (const line of text.split("\n")) {
    if (line.startsWith("```")) fence = !fence;
    else if (!fence && /^#{1,6} /.test(line)) out.add(slug(line.replace(/^#+ /, "")));
  }
  return out;
}

const markdownFiles = [join(root, "README.md"), ...readdirSync(join(root, "docs")).filter((f) => f.endsWith(".md")).map((f) => join(root, "docs", f))];

describe("docs", () => {
  it("docs/configuration-reference.md matches what npm run docs renders", async () => {
    const text = read(REFERENCE_PATH);
    const committed = text.slice(text.indexOf(BEGIN), text.indexOf(END) + END.length);
    expect(committed, "docs/configuration-reference.md is stale: run npm run docs").toBe(await render());
  });

  it("the README's config example is a valid gateway config", () => {
    const blocks = [...read(join(root, "README.md")).matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => m[1]);
    const configs = blocks.filter((b) => b.includes("kind: InferenceGatewayConfig"));
    expect(configs.length).toBeGreaterThan(0);
    for (const yaml of configs) expect(() => parseGatewayConfig(yaml, "README.md")).not.toThrow();
  });

  it("every relative link in README.md and docs/ reaches an existing file and heading", () => {
    const broken: string[] = [];
    for (const file of markdownFiles) {
      // Code spans may hold text that looks like a link (regexes in the reference tables).
      const text = read(file).replace(/`[^`\n]*`/g, "");
      for (const [, target] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
        if (/^[a-z]+:/.test(target)) continue;
        const [path, anchor] = target.split("#");
        const dest = path ? resolve(dirname(file), path) : file;
        if (!existsSync(dest)) broken.push(`${file}: ${target} (no such file)`);
        else if (anchor && dest.endsWith(".md") && !anchors(read(dest)).has(anchor)) broken.push(`${file}: ${target} (no such heading)`);
      }
    }
    expect(broken).toEqual([]);
  });
});
