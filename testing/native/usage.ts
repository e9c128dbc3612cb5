// Loads build/native.wasm for the answer side of the filter: the usage
// scanner (assembly/core/openai/usage.ts) that reads token counts from a model
// server's answer, whole or as the bounded tail the filter keeps per stream.
import { readFile } from "node:fs/promises";
import { pathToFileURL } from "node:url";
import { nativeBindingsPath, nativeWasmPath } from "../../host/paths.js";

export interface TokenUsage {
  promptTokens: number;
  completionTokens: number;
}

interface Bindings {
  usageIn(body: Uint8Array): string;
  usageTailReset(): void;
  usageTailPush(chunk: Uint8Array): number;
  usageTailFind(): string;
  usageTailStreamEnd(responses: boolean): number;
}

/** How a stream ended (core/openai/usage.ts StreamEnd). */
export type StreamEnd = "whole" | "broken" | "failed";
const STREAM_ENDS: StreamEnd[] = ["whole", "broken", "failed"];

export class NativeUsageScanner {
  private constructor(private readonly wasm: Bindings) {}

  static async load(): Promise<NativeUsageScanner> {
    const bindings = await import(pathToFileURL(nativeBindingsPath).href);
    const module = await WebAssembly.compile(await readFile(nativeWasmPath));
    return new NativeUsageScanner(await bindings.instantiate(module, {}));
  }

  /** The last complete usage object in a whole body, or null. */
  find(body: string | Uint8Array): TokenUsage | null {
    return JSON.parse(this.wasm.usageIn(bytes(body))) as TokenUsage | null;
  }

  /**
   * The answer delivered in `chunks`, seen as the filter sees it: only each
   * chunk's end, kept in the bounded tail, read once the stream is over.
   * `read` receives how many bytes of each chunk were copied.
   */
  fromChunks(chunks: Array<string | Uint8Array>, read: (n: number) => void = () => {}): TokenUsage | null {
    this.wasm.usageTailReset();
    for (const c of chunks) read(this.wasm.usageTailPush(bytes(c)));
    return JSON.parse(this.wasm.usageTailFind()) as TokenUsage | null;
  }

  /** How a stream delivered in `chunks` ended, as the filter judges it; `responses`: a Responses API stream. */
  streamEnd(chunks: Array<string | Uint8Array>, responses = false): StreamEnd {
    this.wasm.usageTailReset();
    for (const c of chunks) this.wasm.usageTailPush(bytes(c));
    return STREAM_ENDS[this.wasm.usageTailStreamEnd(responses)];
  }
}

function bytes(s: string | Uint8Array): Uint8Array {
  return typeof s === "string" ? Buffer.from(s) : s;
}
