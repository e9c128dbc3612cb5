// Watches the gateway config file and hands each new version to a reload.
// An editor may replace the file (write a copy, rename it over), and a
// Kubernetes ConfigMap mounted as a folder swaps a `..data` symlink to a new
// timestamped folder: so the folder is watched, not the file, and the
// content is read again every `pollMs` as well, because inotify does not
// see every way a mounted file can change (and may be out of watches).
// Only a changed text counts as an edit; check({ force: true }) (SIGHUP)
// applies the file even if it did not change, e.g. to retry a reload Envoy
// refused. One check at a time; an edit during one is checked after it.
import { setTimeout as sleep } from "node:timers/promises";
import { watch, type FSWatcher } from "node:fs";
import { readFile } from "node:fs/promises";
import { basename, dirname } from "node:path";
import type { GatewayConfig } from "../config.js";

export interface ConfigWatchOptions {
  path: string;
  /**
   * Validates the text the watch read from `path` (never the file again: it
   * may have changed since, and would then be applied twice); throws (a
   * ConfigError names every bad field) when it is not a valid config.
   */
  load(text: string, path: string): Promise<GatewayConfig>;
  /** A new valid config. */
  apply(config: GatewayConfig): Promise<unknown>;
  /** A changed file that is no valid config: the reason, naming the fields. */
  refuse(reason: string): void;
  log: (line: string) => void;
  /** How often the content is read again; default 2000 ms. */
  pollMs?: number;
}

export interface ConfigWatch {
  /** Reads the file and applies it if it changed (or always, with force). */
  check(opts?: { force?: boolean }): Promise<void>;
  close(): void;
}

const DEFAULT_POLL_MS = 2_000;
/** Editors and kubelet change a file in several steps; act once they are done. */
const SETTLE_MS = 100;
/**
 * A changed text is read again after SETTLE_MS until two reads agree (a write
 * in place truncates first, and a read may land before the rest is written),
 * at most this many times; then the last read is judged as it is.
 */
const STABLE_READS = 20;
/** The symlink a ConfigMap volume swaps on every update. */
const CONFIGMAP_DATA_LINK = "..data";

/**
 * Starts watching. The file as it is now is the baseline: the config in
 * force is taken to have been loaded from it.
 */
export async function watchConfigFile(opts: ConfigWatchOptions): Promise<ConfigWatch> {
  const { path, log } = opts;
  let seen: string | null = await readFile(path, "utf8").catch(() => null);
  /** The last read failure reported, so a missing file is not reported every poll. */
  let readFailure: string | null = null;
  let running: Promise<void> | null = null;
  let again: { force: boolean } | null = null;
  let closed = false;

  async function checkOnce(force: boolean): Promise<void> {
    let text: string;
    try {
      text = await readFile(path, "utf8");
    } catch (err) {
      const reason = `${path}: cannot read file: ${(err as Error).message}`;
      if (reason !== readFailure || force) opts.refuse(reason);
      readFailure = reason;
      return;
    }
    readFailure = null;
    if (text === seen && !force) return;
    for (let i = 0; i < STABLE_READS; i++) {
      await sleep(SETTLE_MS);
      const again = await readFile(path, "utf8").catch(() => text);
      if (again === text) break;
      text = again;
    }
    if (text === seen && !force) return;
    seen = text;
    let config: GatewayConfig;
    try {
      config = await opts.load(text, path);
    } catch (err) {
      opts.refuse((err as Error).message);
      return;
    }
    await opts.apply(config);
  }

  function check(o: { force?: boolean } = {}): Promise<void> {
    const force = o.force ?? false;
    if (closed) return Promise.resolve();
    if (running) {
      again = { force: force || (again?.force ?? false) };
      return running;
    }
    running = (async () => {
      try {
        let next: { force: boolean } | null = { force };
        while (next && !closed) {
          again = null;
          await checkOnce(next.force).catch((err) => log(`config check failed: ${(err as Error).message}`));
          next = again;
        }
      } finally {
        running = null;
      }
    })();
    return running;
  }

  let settle: NodeJS.Timeout | undefined;
  const soon = () => {
    clearTimeout(settle);
    settle = setTimeout(() => void check(), SETTLE_MS);
    settle.unref();
  };

  const name = basename(path);
  let watcher: FSWatcher | null = null;
  try {
    watcher = watch(dirname(path), { persistent: false }, (_event, file) => {
      if (file === null || file === name || file === CONFIGMAP_DATA_LINK) soon();
    });
    watcher.on("error", (err) => {
      log(`watching ${dirname(path)} failed (${err.message}); the file is still read every ${opts.pollMs ?? DEFAULT_POLL_MS} ms`);
      watcher?.close();
      watcher = null;
    });
  } catch (err) {
    log(`cannot watch ${dirname(path)} (${(err as Error).message}); the file is read every ${opts.pollMs ?? DEFAULT_POLL_MS} ms`);
  }
  const poll = setInterval(() => void check(), opts.pollMs ?? DEFAULT_POLL_MS);
  poll.unref();
  log(`watching ${path} for changes`);

  return {
    check,
    close() {
      closed = true;
      clearTimeout(settle);
      clearInterval(poll);
      watcher?.close();
    },
  };
}
