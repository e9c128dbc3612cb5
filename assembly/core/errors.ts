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

export function modelNotFound(model: string): ApiError {
  return new ApiError(404, "The model '" + model + "' does not exist or is not served by this gateway",
    "invalid_request_error", "model", "model_not_found");
}

export function bodyTooLarge(limit: i64): ApiError {
  return new ApiError(413, "Request body exceeds the gateway limit of " + limit.toString() + " bytes",
    "invalid_request_error", "", "request_too_large");
}

export function notFound(path: string): ApiError {
  return new ApiError(404, "Unknown path " + path, "invalid_request_error", "", "unknown_url");
}

export function unavailable(message: string): ApiError {
  return new ApiError(503, message, "service_unavailable", "", "no_endpoint");
}

/** A JSON string literal for `s`, escaping what JSON requires. */
export function jsonString(s: string): string {
  let out = '"';
  let run = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0x20 && c != 0x22 && c != 0x5c) continue;
    out += s.substring(run, i);
    if (c == 0x22) out += '\\"';
    else if (c == 0x5c) out += "\\\\";
    else if (c == 0x0a) out += "\\n";
    else if (c == 0x0d) out += "\\r";
    else if (c == 0x09) out += "\\t";
    else out += "\\u00" + (c < 0x10 ? "0" : "") + c.toString(16);
    run = i + 1;
  }
  return out + s.substring(run) + '"';
}
