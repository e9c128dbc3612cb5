// The config file watcher (host/aggregator/config-watch.ts) on real files:
// an editor's save (rename over), a write in place, a Kubernetes ConfigMap
// update (the `..data` symlink swapped to a new folder), an unchanged save,
// an invalid file refused once with its field named, and a forced check.
import { mkdirSync, mkdtempSync, renameSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { watchConfigFile, type ConfigWatch } from "../../host/aggregator/config-watch.js";
import { parseConfigFile, type GatewayConfig } from "../../host/config.js";
import { waitFor } from "../helpers/stack.js";

const configText = (queueWeight: number) => `
pools:
  - { name: llama, baseModel: llama-3.1-8b, weights: { queue: ${queueWeight} }, endpoints: ["127.0.0.1:18001"] }
`;

interface Watched {
  watch: ConfigWatch;
  applied: GatewayConfig[];
  refused: string[];
}

const open: Array<{ watch: ConfigWatch; dir: string }> = [];
afterEach(() => {
  for (const { watch, dir } of open.splice(0)) {
    watch.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

async function watching(dir: string, path: string): Promise<Watched> {
  const applied: GatewayConfig[] = [];
  const refused: string[] = [];
  const watch = await watchConfigFile({
    path,
    load: async (text, p) => parseConfigFile(text, p),
    apply: async (c) => applied.push(c),
    refuse: (reason) => refused.push(reason),
    log: () => {},
    pollMs: 100,
  });
  open.push({ watch, dir });
  return { watch, applied, refused };
}

const queueOf = (c: GatewayConfig) => c.pools[0].weights.queue;
const settle = () => new Promise((r) => setTimeout(r, 400)); // four polls

describe("watchConfigFile", () => {
  it("applies an editor's save (a new file renamed over), a write in place, and nothing for an unchanged save", async () => {
    const dir = mkdtempSync(join(tmpdir(), "config-watch-"));
    const path = join(dir, "gateway.yaml");
    writeFileSync(path, configText(1));
    const w = await watching(dir, path);

    writeFileSync(`${path}.swp`, configText(2));
    renameSync(`${path}.swp`, path);
    await waitFor("the renamed file to be applied", () => w.applied.length === 1);
    expect(queueOf(w.applied[0])).toBe(2);

    writeFileSync(path, configText(3));
    await waitFor("the file written in place to be applied", () => w.applied.length === 2);
    expect(queueOf(w.applied[1])).toBe(3);

    writeFileSync(path, configText(3));
    await settle();
    expect(w.applied.length).toBe(2);
    expect(w.refused).toEqual([]);
  });

  it("waits for a write in place to finish: a file read between its truncation and its writing is never judged", async () => {
    const dir = mkdtempSync(join(tmpdir(), "config-watch-partial-"));
    const path = join(dir, "gateway.yaml");
    writeFileSync(path, configText(1));
    const w = await watching(dir, path);
    // A check that reads the file just after a write in place emptied it, before the rest is written.
    writeFileSync(path, "");
    const checking = w.watch.check();
    await new Promise((r) => setTimeout(r, 30));
    writeFileSync(path, configText(2));
    await checking;
    await waitFor("the whole file to be applied", () => w.applied.length === 1);
    await settle();
    expect(w.applied.map(queueOf)).toEqual([2]);
    expect(w.refused).toEqual([]);
  });

  it("applies the text it read, so an edit landing while one is applied is applied once, after it", async () => {
    const dir = mkdtempSync(join(tmpdir(), "config-watch-race-"));
    const path = join(dir, "gateway.yaml");
    writeFileSync(path, configText(1));
    const applied: number[] = [];
    let edited = false;
    const watch = await watchConfigFile({
      path,
      load: async (text, p) => {
        // The next edit lands between the watch's read and this parse.
        if (!edited) {
          edited = true;
          writeFileSync(path, configText(3));
        }
        return parseConfigFile(text, p);
      },
      apply: async (c) => applied.push(queueOf(c)),
      refuse: () => {},
      log: () => {},
      pollMs: 100,
    });
    open.push({ watch, dir });
    writeFileSync(path, configText(2));
    await waitFor("both edits to be applied", () => applied.length >= 2);
    await settle();
    expect(applied).toEqual([2, 3]);
  });

  it("follows a ConfigMap volume: the ..data symlink swapped to a new folder", async () => {
    const dir = mkdtempSync(join(tmpdir(), "config-watch-cm-"));
    // As the kubelet lays a ConfigMap out: gateway.yaml -> ..data/gateway.yaml, ..data -> ..<timestamp>.
    const version = (name: string, text: string) => {
      mkdirSync(join(dir, name));
      writeFileSync(join(dir, name, "gateway.yaml"), text);
    };
    version("..2026_12_01_00_00_00.1", configText(1));
    symlinkSync("..2026_12_01_00_00_00.1", join(dir, "..data"));
    symlinkSync("..data/gateway.yaml", join(dir, "gateway.yaml"));
    const w = await watching(dir, join(dir, "gateway.yaml"));

    version("..2026_12_01_00_01_00.2", configText(5));
    symlinkSync("..2026_12_01_00_01_00.2", join(dir, "..data_tmp"));
    renameSync(join(dir, "..data_tmp"), join(dir, "..data"));
    rmSync(join(dir, "..2026_12_01_00_00_00.1"), { recursive: true });
    await waitFor("the new ConfigMap version to be applied", () => w.applied.length === 1);
    expect(queueOf(w.applied[0])).toBe(5);
  });

  it("refuses an invalid file once, naming the field, and applies it when it is fixed; a forced check applies an unchanged file", async () => {
    const dir = mkdtempSync(join(tmpdir(), "config-watch-bad-"));
    const path = join(dir, "gateway.yaml");
    writeFileSync(path, configText(1));
    const w = await watching(dir, path);

    writeFileSync(path, configText(-1));
    await waitFor("the invalid file to be refused", () => w.refused.length === 1);
    expect(w.refused[0]).toContain("pools[0].weights.queue: expected a number >= 0");
    await settle();
    expect(w.refused.length).toBe(1);
    expect(w.applied).toEqual([]);

    rmSync(path);
    await waitFor("the missing file to be refused", () => w.refused.length === 2);
    expect(w.refused[1]).toMatch(/gateway\.yaml: cannot read file/);
    await settle();
    expect(w.refused.length).toBe(2);

    writeFileSync(path, configText(4));
    await waitFor("the fixed file to be applied", () => w.applied.length === 1);
    expect(queueOf(w.applied[0])).toBe(4);

    await w.watch.check({ force: true });
    expect(w.applied.length).toBe(2);
    expect(queueOf(w.applied[1])).toBe(4);
  });
});
