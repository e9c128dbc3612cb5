// Reads what routing needs from an OpenAI-style request body: `model`,
// `stream`, and where the prompt (`messages`, `prompt`, or a Responses
// request's `input` with the `instructions` written before it) lies, as a byte
// span for prefix hashing without decoding it.
//
// Fields are read as the model server reads them: Python's json.loads keeps
// the last of duplicate keys, then pydantic validates that final value. So the
// scan only records where each field's last occurrence is, and read()
// validates after the scan.
import { jsonString } from "./errors";
import { hashBytes } from "../wire/hash";
import { JsonScanner, JsonType } from "./json";

export const enum ApiKind { Chat = 0, Completions = 1, Responses = 2, Other = 3 }

/** Where the last occurrence of a top-level member's value lies; type 0 = absent. */
class Member {
  type: i32 = 0;
  start: i32 = 0;
  end: i32 = 0;

  set(type: JsonType, start: i32, end: i32): void {
    this.type = type;
    this.start = start;
    this.end = end;
  }
}

export class OpenAIRequest extends JsonScanner {
  hasModel: bool = false;
  /** The model's name in the body, unescaped: where it starts and how long (a name with escapes has modelEscaped instead). */
  modelPtr: usize = 0;
  modelLen: i32 = 0;
  modelEscaped: bool = false;
  private modelName: string | null = null;
  stream: bool = false;
  /** A stream that asked for stream_options.include_usage: its last event carries the token counts. */
  includeUsage: bool = false;
  promptStart: i32 = -1;
  promptEnd: i32 = -1;
  /** Which field held the prompt: "messages", "prompt", "input" or "". */
  promptField: string = "";
  /** The output asked for (max_completion_tokens, else max_tokens; max_output_tokens for Responses) when a plain positive integer; 0 otherwise. */
  maxTokens: i64 = 0;
  /** The validation message for a client error; empty when the body is usable. */
  problem: string = "";
  /** The field the problem is about, for the OpenAI error's `param`. */
  problemParam: string = "";

  private modelMember: Member = new Member();
  private streamMember: Member = new Member();
  private streamOptionsMember: Member = new Member();
  private messagesMember: Member = new Member();
  private promptMember: Member = new Member();
  private maxTokensMember: Member = new Member();
  private maxCompletionTokensMember: Member = new Member();
  private inputMember: Member = new Member();
  private instructionsMember: Member = new Member();
  private maxOutputTokensMember: Member = new Member();

  /** The model's name, decoded on first use (while the body read last is still in memory). */
  get model(): string {
    let name = this.modelName;
    if (name == null) {
      name = this.stringAt(this.modelMember.start, this.modelMember.end);
      this.modelName = name;
    }
    return name;
  }

  /**
   * Scans the body; on false, `problem` and `problemParam` say why. Chat
   * requires `messages`, completions `prompt` and Responses `input`; the
   * others are then extras the server ignores, whatever their type.
   */
  read(ptr: usize, len: i32, kind: ApiKind): bool {
    this.hasModel = false;
    this.modelName = null;
    this.modelEscaped = false;
    this.stream = false;
    this.includeUsage = false;
    this.promptStart = -1;
    this.promptEnd = -1;
    this.promptField = "";
    this.problem = "";
    this.problemParam = "";
    this.modelMember.type = 0;
    this.streamMember.type = 0;
    this.streamOptionsMember.type = 0;
    this.messagesMember.type = 0;
    this.promptMember.type = 0;
    this.maxTokensMember.type = 0;
    this.maxCompletionTokensMember.type = 0;
    this.inputMember.type = 0;
    this.instructionsMember.type = 0;
    this.maxOutputTokensMember.type = 0;
    this.maxTokens = 0;
    if (!this.scanObject(ptr, len)) {
      this.problem = (this.badUtf8 ? "request body is not valid UTF-8: " : "request body is not valid JSON: ") + this.error;
      return false;
    }

    const model = this.modelMember;
    if (model.type == 0) return this.reject("you must provide a model parameter", "model");
    if (model.type != JsonType.String) return this.reject("'model' must be a string", "model");
    // Routing looks the name up by its bytes; only an error or a name with escapes needs it as a string.
    this.modelPtr = ptr + <usize>(model.start + 1);
    this.modelLen = model.end - model.start - 2;
    if (this.modelLen == 0) return this.reject("'model' must not be empty", "model");
    this.modelEscaped = hasBackslash(this.modelPtr, this.modelLen);
    this.hasModel = true;

    const stream = this.streamMember.type;
    if (stream == JsonType.True) this.stream = true;
    else if (stream != 0 && stream != JsonType.False && stream != JsonType.Null) {
      return this.reject("'stream' must be a boolean", "stream");
    }
    const options = this.streamOptionsMember;
    // A Responses stream always ends with response.completed, which carries the usage.
    if (kind == ApiKind.Responses) this.includeUsage = this.stream;
    else if (this.stream && options.type == JsonType.Object) {
      // Already validated by the scan above; only include_usage is read.
      STREAM_OPTIONS.includeUsage = false;
      this.includeUsage = STREAM_OPTIONS.scanObject(this.base + <usize>options.start, options.end - options.start) && STREAM_OPTIONS.includeUsage;
    }

    // Only read to size a deadline: the model server validates these fields.
    if (kind == ApiKind.Responses) {
      this.maxTokens = this.integerAt(this.maxOutputTokensMember);
    } else {
      this.maxTokens = this.integerAt(this.maxCompletionTokensMember);
      if (this.maxTokens == 0) this.maxTokens = this.integerAt(this.maxTokensMember);
    }

    const messages = this.messagesMember;
    const prompt = this.promptMember;
    const promptOk = prompt.type == JsonType.String || prompt.type == JsonType.Array;
    if (kind == ApiKind.Chat) {
      if (messages.type == 0) return this.reject("'messages' is a required property", "messages");
      if (messages.type != JsonType.Array) return this.reject("'messages' must be an array", "messages");
      this.setPrompt("messages", messages);
    } else if (kind == ApiKind.Completions) {
      if (prompt.type == 0) return this.reject("'prompt' is a required property", "prompt");
      if (!promptOk) return this.reject("'prompt' must be a string or an array", "prompt");
      this.setPrompt("prompt", prompt);
    } else if (kind == ApiKind.Responses) {
      const input = this.inputMember;
      if (input.type == 0) return this.reject("'input' is a required property", "input");
      if (input.type != JsonType.String && input.type != JsonType.Array) return this.reject("'input' must be a string or an array", "input");
      this.setPrompt("input", input);
      // The server puts the instructions ahead of the input: written first, they start the prefix too.
      const instructions = this.instructionsMember;
      if (instructions.type == JsonType.String && instructions.end <= input.start) this.promptStart = instructions.start;
    } else if (messages.type == JsonType.Array) {
      this.setPrompt("messages", messages);
    } else if (promptOk) {
      this.setPrompt("prompt", prompt);
    }
    return true;
  }

  /**
   * The body with the value of its (last, i.e. effective) `model` member
   * replaced by `name`: for a canary split, the pod must read the model the
   * gateway chose. Valid after a successful read(), while the buffer is.
   */
  withModel(name: string): ArrayBuffer {
    const m = this.modelMember;
    const literal = String.UTF8.encode(jsonString(name));
    const tail = this.len - m.end;
    const out = new ArrayBuffer(m.start + literal.byteLength + tail);
    const dst = changetype<usize>(out);
    memory.copy(dst, this.base, <usize>m.start);
    memory.copy(dst + <usize>m.start, changetype<usize>(literal), <usize>literal.byteLength);
    memory.copy(dst + <usize>(m.start + literal.byteLength), this.base + <usize>m.end, <usize>tail);
    return out;
  }

  /** Hash of the whole body as read: a retry resends the same bytes. */
  bodyHash(): u64 {
    return hashBytes(this.base, this.len);
  }

  /** The raw prompt bytes' start address in the scanned buffer. */
  promptPtr(): usize {
    return this.base + <usize>this.promptStart;
  }

  protected member(keyStart: i32, keyEnd: i32, type: JsonType, valueStart: i32, valueEnd: i32): void {
    if (this.keyIs(keyStart, keyEnd, "model")) this.modelMember.set(type, valueStart, valueEnd);
    else if (this.keyIs(keyStart, keyEnd, "stream")) this.streamMember.set(type, valueStart, valueEnd);
    else if (this.keyIs(keyStart, keyEnd, "stream_options")) this.streamOptionsMember.set(type, valueStart, valueEnd);
    else if (this.keyIs(keyStart, keyEnd, "messages")) this.messagesMember.set(type, valueStart, valueEnd);
    else if (this.keyIs(keyStart, keyEnd, "prompt")) this.promptMember.set(type, valueStart, valueEnd);
    else if (this.keyIs(keyStart, keyEnd, "max_tokens")) this.maxTokensMember.set(type, valueStart, valueEnd);
    else if (this.keyIs(keyStart, keyEnd, "max_completion_tokens")) this.maxCompletionTokensMember.set(type, valueStart, valueEnd);
    else if (this.keyIs(keyStart, keyEnd, "input")) this.inputMember.set(type, valueStart, valueEnd);
    else if (this.keyIs(keyStart, keyEnd, "instructions")) this.instructionsMember.set(type, valueStart, valueEnd);
    else if (this.keyIs(keyStart, keyEnd, "max_output_tokens")) this.maxOutputTokensMember.set(type, valueStart, valueEnd);
  }

  /** A number member made only of up to 9 digits, as an integer; 0 for anything else. */
  private integerAt(m: Member): i64 {
    if (m.type != JsonType.Number || m.end - m.start > 9) return 0;
    let v: i64 = 0;
    for (let i = m.start; i < m.end; i++) {
      const c = this.at(i);
      if (c < 0x30 || c > 0x39) return 0;
      v = v * 10 + <i64>(c - 0x30);
    }
    return v;
  }

  private setPrompt(field: string, m: Member): void {
    this.promptField = field;
    this.promptStart = m.start;
    this.promptEnd = m.end;
  }

  private reject(message: string, param: string): bool {
    this.problem = message;
    this.problemParam = param;
    return false;
  }
}

/** A stream's options: the gateway reads only include_usage (whether the answer will carry token counts). */
class StreamOptions extends JsonScanner {
  includeUsage: bool = false;

  protected member(keyStart: i32, keyEnd: i32, type: JsonType, valueStart: i32, valueEnd: i32): void {
    if (this.keyIs(keyStart, keyEnd, "include_usage")) this.includeUsage = type == JsonType.True;
  }
}

const STREAM_OPTIONS = new StreamOptions();

function hasBackslash(ptr: usize, len: i32): bool {
  for (let i = 0; i < len; i++) if (load<u8>(ptr + <usize>i) == 0x5c) return true;
  return false;
}
