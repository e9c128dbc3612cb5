// Which of the gateway's API routes a request is, from its method and path:
// inference (routed to a pod by its body), the model list and one model
// (answered from the snapshot), health (answered by the gateway), or any
// other path (passed to Envoy's route table untouched). Envoy has already
// normalised the path (normalize_path, merge_slashes); the query is ignored.
import { ApiKind } from "./request";

export const enum ApiRoute { Other = 0, Inference = 1, ListModels = 2, GetModel = 3, Health = 4 }

const MODELS_PREFIX = "/v1/models/";

export class RouteOfPath {
  route: ApiRoute = ApiRoute.Other;
  /** For ApiRoute.Inference: which request body it carries. */
  kind: ApiKind = ApiKind.Other;
  /** For ApiRoute.GetModel: the model id, its %XX escapes decoded. */
  modelId: string = "";

  /** Classifies `path` (bytes at `ptr`, `len`) of a POST (`post`) or a GET (`get`); any other method is Other. */
  classify(post: bool, get: bool, ptr: usize, len: i32): void {
    this.route = ApiRoute.Other;
    this.kind = ApiKind.Other;
    this.modelId = "";
    const n = pathEnd(ptr, len);
    if (post) {
      if (equalsAscii(ptr, n, "/v1/chat/completions")) this.kind = ApiKind.Chat;
      else if (equalsAscii(ptr, n, "/v1/completions")) this.kind = ApiKind.Completions;
      else if (equalsAscii(ptr, n, "/v1/responses")) this.kind = ApiKind.Responses;
      else if (!equalsAscii(ptr, n, "/v1/embeddings")) return;
      this.route = ApiRoute.Inference;
    } else if (get) {
      if (equalsAscii(ptr, n, "/v1/models")) this.route = ApiRoute.ListModels;
      else if (n > MODELS_PREFIX.length && startsWithAscii(ptr, n, MODELS_PREFIX)) {
        this.route = ApiRoute.GetModel;
        this.modelId = percentDecode(ptr + <usize>MODELS_PREFIX.length, n - MODELS_PREFIX.length);
      } else if (equalsAscii(ptr, n, "/health")) this.route = ApiRoute.Health;
    }
  }
}

/** The path's length without its query. */
function pathEnd(ptr: usize, len: i32): i32 {
  for (let i = 0; i < len; i++) if (load<u8>(ptr + <usize>i) == 0x3f) return i;
  return len;
}

export function equalsAscii(ptr: usize, len: i32, s: string): bool {
  return len == s.length && startsWithAscii(ptr, len, s);
}

/** ASCII, case-sensitive (header names arrive lower-cased from Envoy). */
export function startsWithAscii(ptr: usize, len: i32, prefix: string): bool {
  if (len < prefix.length) return false;
  for (let i = 0; i < prefix.length; i++) {
    if (<i32>load<u8>(ptr + <usize>i) != prefix.charCodeAt(i)) return false;
  }
  return true;
}

/** A path segment's %XX escapes decoded (model ids may be escaped by clients); bad escapes stay as they are. */
function percentDecode(ptr: usize, len: i32): string {
  const out = new Uint8Array(len);
  let n = 0;
  for (let i = 0; i < len; i++) {
    const c = load<u8>(ptr + <usize>i);
    if (c == 0x25 && i + 2 < len) {
      const hi = hexDigit(load<u8>(ptr + <usize>(i + 1)));
      const lo = hexDigit(load<u8>(ptr + <usize>(i + 2)));
      if (hi >= 0 && lo >= 0) {
        out[n++] = <u8>((hi << 4) | lo);
        i += 2;
        continue;
      }
    }
    out[n++] = c;
  }
  return String.UTF8.decodeUnsafe(out.dataStart, <usize>n);
}

function hexDigit(c: u8): i32 {
  if (c >= 0x30 && c <= 0x39) return c - 0x30;
  const l = c | 0x20;
  return l >= 0x61 && l <= 0x66 ? l - 0x61 + 10 : -1;
}
