// The host side of proxy-wasm contexts: what a host call may see depends on
// the context the VM is running for (a root context, or an HTTP stream) and,
// for a stream, on the callback in progress.
import type { HeaderMap } from "./header-map.js";
import type { Pair } from "./pairs.js";

/** What the plugin configured for one root_id (Envoy's PluginBase). */
export interface PluginSpec {
  /** Envoy's plugin `name`. */
  name: string;
  rootId: string;
  /** The plugin configuration (the `configuration` value Envoy hands over). */
  configuration: string;
}

export interface LocalResponse {
  status: number;
  body: string;
  headers: Pair[];
  details: string;
  grpcStatus: number;
}

export interface CallContext {
  readonly id: number;
  /** The root context: itself for a root. */
  readonly root: RootContext;
  /** A header map the running callback may use, or null where Envoy has none (reads give no pairs, edits fail). */
  headerMap(type: number): HeaderMap | null;
  /** The request body as the running callback sees it; empty outside body callbacks. */
  requestBody(): Uint8Array;
  /**
   * proxy_set_buffer_bytes on the request body, as Envoy's Buffer::copyFrom:
   * start 0 drains `length` bytes and prepends `data`; start at or past the
   * end appends; anything else is BadArgument. False where there is no body.
   */
  setRequestBody(start: number, length: number, data: Uint8Array): "ok" | "bad" | "none";
  /** The response data frame proxy_on_response_body is delivering; empty outside it. */
  responseBody(): Uint8Array;
  property(path: string): Uint8Array | undefined;
  /** proxy_set_property: the stream's filter state; false where there is no stream. */
  setProperty?(path: string, value: Uint8Array): boolean;
  sendLocalResponse(reply: LocalResponse): void;
  /** proxy_continue_stream on the request: lets a paused request go on (streams only). */
  continueRequest?(): boolean;
}

export class RootContext implements CallContext {
  readonly root: RootContext = this;
  /** 0 = no timer; set by proxy_set_tick_period_milliseconds. */
  tickPeriodMs = 0;
  /** Envoy's temp_plugin_: the configuration is readable only while the plugin is created or configured. */
  configurationVisible = false;
  /** The message proxy_on_grpc_receive is delivering. */
  grpcMessage: Uint8Array | null = null;

  /** `plugin` is null for the VM's own context (id 0), used while the module initialises. */
  constructor(
    readonly id: number,
    readonly plugin: PluginSpec | null,
    private readonly vmId: string,
  ) {}

  headerMap(): HeaderMap | null {
    return null;
  }

  requestBody(): Uint8Array {
    return new Uint8Array(0);
  }

  setRequestBody(): "none" {
    return "none";
  }

  responseBody(): Uint8Array {
    return new Uint8Array(0);
  }

  property(path: string): Uint8Array | undefined {
    if (this.plugin === null) return undefined;
    if (path === "plugin_root_id") return Buffer.from(this.plugin.rootId);
    if (path === "plugin_name") return Buffer.from(this.plugin.name);
    if (path === "plugin_vm_id") return Buffer.from(this.vmId);
    return undefined;
  }

  /** Envoy has no stream to answer outside a stream: the call succeeds and does nothing. */
  sendLocalResponse(): void {}
}
