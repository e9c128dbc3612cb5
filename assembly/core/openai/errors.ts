// Client-facing errors in the OpenAI error format:
// {"error":{"message":...,"type":...,"param":...,"code":...}}

export class ApiError {
  constructor(
    public status: i32,
    public message: string,
    public type: string,
    public param: string,
    public code: string,
  ) {}

  toJson(): string {
    return '{"error":{"message":' + jsonString(this.message) +
      ',"type":' + jsonString(this.type) +
      ',"param":' + (this.param.length > 0 ? jsonString(this.param) : "null") +
      ',"code":' + (this.code.length > 0 ? jsonString(this.code) : "null") + "}}";
  }
}

export function badRequest(message: string, param: string): ApiError {
  return new ApiError(400, message, "invalid_request_error", param, "");
}

/** Longest model name an error repeats: a name may be megabytes long. */
export const MAX_ECHOED_NAME = 256;

export function modelNotFound(model: string): ApiError {
  return new ApiError(404, "The model '" + shortened(model) + "' does not exist or is not served by this gateway",
    "invalid_request_error", "model", "model_not_found");
}

/** At most MAX_ECHOED_NAME UTF-16 units and "...", never splitting a surrogate pair. */
function shortened(name: string): string {
  if (name.length <= MAX_ECHOED_NAME) return name;
  let end = MAX_ECHOED_NAME;
  const last = name.charCodeAt(end - 1);
  if (last >= 0xd800 && last <= 0xdbff) end--;
  return name.substring(0, end) + "...";
}

export function bodyTooLarge(limit: i64): ApiError {
  return new ApiError(413, "Request body exceeds the gateway limit of " + limit.toString() + " bytes",
    "invalid_request_error", "", "request_too_large");
}

export function notFound(path: string): ApiError {
  return new ApiError(404, "Unknown path " + path, "invalid_request_error", "", "unknown_url");
}

/** The pool has no room for the request's class: come back after `retryAfterS` (also sent as Retry-After). */
export function saturated(pool: string, className: string, retryAfterS: u32): ApiError {
  return new ApiError(429, "The model servers of pool '" + pool + "' are saturated for " + className +
    " requests; retry after " + retryAfterS.toString() + " s", "rate_limit_error", "", "pool_saturated");
}

export function unavailable(message: string): ApiError {
  return new ApiError(503, message, "service_unavailable", "", "no_endpoint");
}

/**
 * A JSON string literal for `s`, escaping what JSON requires and any lone
 * UTF-16 surrogate (a client can send "\ud800"), which has no UTF-8 form and
 * would otherwise make the error body invalid text. Sized first and written
 * once: `s` may be a client's multi-megabyte model name full of escapes.
 */
export function jsonString(s: string): string {
  const src = changetype<usize>(s);
  const n = s.length;
  let size = 2;
  for (let i = 0; i < n; i++) size += escapedWidth(src, i, n);
  const out = new StaticArray<u16>(size);
  const dst = changetype<usize>(out);
  store<u16>(dst, 0x22);
  let o: usize = 1;
  for (let i = 0; i < n; i++) {
    const c = load<u16>(src + (<usize>i << 1));
    const w = escapedWidth(src, i, n);
    if (w == 1) {
      store<u16>(dst + (o << 1), c);
    } else if (w == 2) {
      store<u16>(dst + (o << 1), 0x5c);
      store<u16>(dst + ((o + 1) << 1), c == 0x0a ? 0x6e : c == 0x0d ? 0x72 : c == 0x09 ? 0x74 : c);
    } else {
      store<u16>(dst + (o << 1), 0x5c);
      store<u16>(dst + ((o + 1) << 1), 0x75);
      for (let k: usize = 0; k < 4; k++) {
        const d = (c >> <u16>(12 - 4 * k)) & 0xf;
        store<u16>(dst + ((o + 2 + k) << 1), d < 10 ? 0x30 + d : 0x57 + d);
      }
    }
    o += <usize>w;
  }
  store<u16>(dst + (o << 1), 0x22);
  return String.UTF16.decodeUnsafe(dst, <usize>size << 1);
}

/** How many units the UTF-16 unit at `i` takes in a JSON string: 1 as it is, 2 or 6 escaped. */
function escapedWidth(src: usize, i: i32, n: i32): i32 {
  const c = load<u16>(src + (<usize>i << 1));
  if (c >= 0x20 && c != 0x22 && c != 0x5c && (c & 0xf800) != 0xd800) return 1;
  if (c == 0x22 || c == 0x5c || c == 0x0a || c == 0x0d || c == 0x09) return 2;
  if (c < 0x20) return 6;
  if (c < 0xdc00) return i + 1 < n && (load<u16>(src + (<usize>(i + 1) << 1)) & 0xfc00) == 0xdc00 ? 1 : 6;
  return i > 0 && (load<u16>(src + (<usize>(i - 1) << 1)) & 0xfc00) == 0xd800 ? 1 : 6;
}
