/**
 * A fleet of fake model-server pods in one Node process: each pod is an
 * Engine driven in real time behind its own HTTP server on 127.0.0.1.
 */
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { Engine } from "../engine/index.js";
import { RealtimeDriver } from "./driver.js";
import { type FaultMode, PodFaults } from "./faults.js";
import { METRICS_FORMATS, type MetricsFormat, MetricsRenderer } from "./metrics.js";
import { createPodServer, type LoadRequest } from "./server.js";

const positive = z.number().positive();
const nonNegative = z.number().nonnegative();

/** Engine overrides a pod may set; the model comes from the pod itself. */
const engineOverrides = z
  .object({
    speed: positive,
    stepOverheadMs: positive,
    decodeMsPerSeq: nonNegative,
    decodeMsPerKTokens: nonNegative,
    prefillMsPerToken: nonNegative,
    prefillMsPerKTokens: nonNegative,
    maxNumBatchedTokens: z.number().int().positive(),
    maxNumSeqs: z.number().int().positive(),
    blockSize: z.number().int().positive(),
    numGpuBlocks: z.number().int().positive(),
    maxModelLen: z.number().int().positive(),
    maxLoras: z.number().int().nonnegative(),
    loraLoadMs: nonNegative,
    charsPerToken: positive,
    tokenizer: z.enum(["fixed", "words"]),
  })
  .partial()
  .strict();

export const podSpecSchema = z
  .object({
    name: z.string().min(1),
    /** 0 picks a free port. */
    port: z.number().int().min(0).max(65535).default(0),
    /** Base model served. */
    model: z.string().min(1),
    /** LoRA adapters the pod can load (served under their own model names). */
    adapters: z.array(z.string().min(1)).default([]),
    /**
     * Adapters (among `adapters`) loaded when the pod starts and never
     * evicted. Like vLLM's, its metrics list them only while requests use
     * them (metrics.ts vllmAdapterLists): an idle pod lists none.
     */
    preloadAdapters: z.array(z.string().min(1)).optional(),
    metricsFormat: z.enum(METRICS_FORMATS).default("vllm"),
    engineConfig: engineOverrides.default({}),
  })
  .strict();

export type PodSpec = z.input<typeof podSpecSchema>;

export interface FleetOptions {
  /** Serve GET /admin/state, POST /admin/load and POST /admin/fault on every pod (off by default). */
  admin?: boolean;
  /** Interface to listen on; loopback unless a container must be reachable from others. */
  host?: string;
  /** Serve HTTPS with this certificate and key (PEM), like pods behind TLS. */
  tls?: { cert: string; key: string };
}

export interface Pod {
  readonly name: string;
  readonly model: string;
  readonly adapters: readonly string[];
  readonly metricsFormat: MetricsFormat;
  readonly port: number;
  /** "127.0.0.1:port", as an endpoint picker would address it. */
  readonly address: string;
  /** "http://127.0.0.1:port". */
  readonly url: string;
  /** The live engine: inspect metrics(), or change config.speed to slow the pod down. */
  readonly engine: Engine;
  readonly driver: RealtimeDriver;
  /** Queue synthetic requests (unique prompts, no client) to make the pod busy. */
  injectLoad(load: LoadRequest): void;
  /** The fault the pod is in (faults.ts); null when it behaves. */
  readonly fault: FaultMode | null;
  /** Switches the pod into a fault, or out of one (null), for the requests that follow. */
  setFault(mode: FaultMode | null): void;
  /** Kills the pod as a crash would: its port closes and open connections (streams included) are cut. */
  close(): Promise<void>;
}

export interface Fleet {
  readonly pods: readonly Pod[];
  /** The pod named `name`; throws if there is none. */
  pod(name: string): Pod;
  close(): Promise<void>;
}

/** Validate pod specs (from code or a config file); names must be unique. */
export function parsePodSpecs(input: unknown): z.output<typeof podSpecSchema>[] {
  const specs = z.array(podSpecSchema).parse(input);
  const seen = new Set<string>();
  for (const s of specs) {
    if (seen.has(s.name)) throw new Error(`duplicate pod name ${s.name}`);
    seen.add(s.name);
    for (const a of s.preloadAdapters ?? []) {
      if (!s.adapters.includes(a)) throw new Error(`pod ${s.name} preloads ${a}, which is not among its adapters`);
    }
  }
  return specs;
}

/** A YAML or JSON fleet file: either a list of pod specs or `{ pods: [...] }`. */
export function parseFleetFile(text: string): z.output<typeof podSpecSchema>[] {
  const doc: unknown = parseYaml(text);
  const list = doc && typeof doc === "object" && !Array.isArray(doc) && "pods" in doc ? doc.pods : doc;
  return parsePodSpecs(list);
}

export async function startFleet(specs: PodSpec[], opts: FleetOptions = {}): Promise<Fleet> {
  const parsed = parsePodSpecs(specs);
  const clock = (): number => performance.now();
  const pods: Pod[] = [];
  const servers: Server[] = [];
  const close = async (): Promise<void> => {
    for (const p of pods) p.driver.close();
    await Promise.all(servers.map(stopServer));
  };

  try {
    for (const spec of parsed) {
      const engine = new Engine({ ...spec.engineConfig, model: spec.model }, clock());
      for (const a of spec.preloadAdapters ?? []) engine.pinAdapter(a);
      const driver = new RealtimeDriver(engine, clock);
      let loadSeq = 0;
      const injectLoad = ({ requests, promptTokens = 512, maxTokens = 256 }: LoadRequest): void => {
        for (let i = 0; i < requests; i++) {
          const id = `load-${spec.name}-${loadSeq++}`;
          // Unique text so injected requests never share prefix blocks.
          const prompt = `${id} `.padEnd(promptTokens * engine.config.charsPerToken, "x");
          driver.submit({ id, prompt, maxTokens });
        }
      };
      const faults = new PodFaults();
      const server = createPodServer({
        name: spec.name,
        model: spec.model,
        adapters: new Set(spec.adapters),
        driver,
        metrics: new MetricsRenderer(spec.metricsFormat, spec.adapters.length > 0 && engine.config.maxLoras > 0),
        faults,
        admin: opts.admin ?? false,
        injectLoad,
      }, opts.tls);
      servers.push(server);
      const port = await listen(server, spec.port, opts.host ?? "127.0.0.1");
      pods.push({
        name: spec.name,
        model: spec.model,
        adapters: spec.adapters,
        metricsFormat: spec.metricsFormat,
        port,
        address: `127.0.0.1:${port}`,
        url: `${opts.tls ? "https" : "http"}://127.0.0.1:${port}`,
        engine,
        driver,
        injectLoad,
        get fault() {
          return faults.mode;
        },
        setFault: (mode) => faults.set(mode),
        close: async () => {
          driver.close();
          await stopServer(server);
        },
      });
    }
  } catch (err) {
    await close();
    throw err;
  }

  return {
    pods,
    pod(name) {
      const p = pods.find((x) => x.name === name);
      if (!p) throw new Error(`no pod named ${name}`);
      return p;
    },
    close,
  };
}

/** Resolves once the server stopped listening; a server already stopped resolves at once. */
function stopServer(server: Server): Promise<void> {
  return new Promise<void>((resolve) => {
    server.close(() => resolve());
    // Streaming and keep-alive sockets would otherwise hold close() open.
    server.closeAllConnections();
  });
}

function listen(server: Server, port: number, host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      server.off("error", reject);
      resolve((server.address() as AddressInfo).port);
    });
  });
}
