// Reads what routing needs from an OpenAI-style request body: `model`,
// `stream`, and where the prompt (`messages` or `prompt`) lies, as a byte span
// for prefix hashing without decoding it.
import { JsonScanner, JsonType } from "./json";

export const enum ApiKind { Chat = 0, Completions = 1, Other = 2 }

export class OpenAIRequest extends JsonScanner {
  model: string = "";
  hasModel: bool = false;
  stream: bool = false;
  promptStart: i32 = -1;
  promptEnd: i32 = -1;
  /** Which field held the prompt: "messages", "prompt" or "". */
  promptField: string = "";
  /** The validation message for a client error; empty when the body is usable. */
  problem: string = "";
  /** The field the problem is about, for the OpenAI error's `param`. */
  problemParam: string = "";

  /** Scans the body; on false, `problem` and `problemParam` say why. */
  read(ptr: usize, len: i32, kind: ApiKind): bool {
    this.model = "";
    this.hasModel = false;
    this.stream = false;
    this.promptStart = -1;
    this.promptEnd = -1;
    this.promptField = "";
    this.problem = "";
    this.problemParam = "";
    if (!this.scanObject(ptr, len)) {
      if (this.problem.length == 0) this.problem = "request body is not valid JSON: " + this.error;
      return false;
    }
    if (!this.hasModel) return this.reject("you must provide a model parameter", "model");
    if (kind == ApiKind.Chat && this.promptField != "messages") {
      return this.reject("'messages' is a required property", "messages");
    }
    if (kind == ApiKind.Completions && this.promptField != "prompt") {
      return this.reject("'prompt' is a required property", "prompt");
    }
    return true;
  }

  /** The raw prompt bytes' start address in the scanned buffer. */
  promptPtr(): usize {
    return this.base + <usize>this.promptStart;
  }

  protected member(keyStart: i32, keyEnd: i32, type: JsonType, valueStart: i32, valueEnd: i32): void {
    if (this.keyIs(keyStart, keyEnd, "model")) {
      if (type != JsonType.String) {
        this.rejectMember("'model' must be a string", "model");
        return;
      }
      this.model = this.stringAt(valueStart, valueEnd);
      if (this.model.length == 0) {
        this.rejectMember("'model' must not be empty", "model");
        return;
      }
      this.hasModel = true;
    } else if (this.keyIs(keyStart, keyEnd, "stream")) {
      if (type == JsonType.True) this.stream = true;
      else if (type == JsonType.False || type == JsonType.Null) this.stream = false;
      else this.rejectMember("'stream' must be a boolean", "stream");
    } else if (this.keyIs(keyStart, keyEnd, "messages")) {
      if (type != JsonType.Array) {
        this.rejectMember("'messages' must be an array", "messages");
        return;
      }
      this.setPrompt("messages", valueStart, valueEnd);
    } else if (this.keyIs(keyStart, keyEnd, "prompt")) {
      if (type != JsonType.String && type != JsonType.Array) {
        this.rejectMember("'prompt' must be a string or an array", "prompt");
        return;
      }
      this.setPrompt("prompt", valueStart, valueEnd);
    }
  }

  private setPrompt(field: string, start: i32, end: i32): void {
    this.promptField = field;
    this.promptStart = start;
    this.promptEnd = end;
  }

  private reject(message: string, param: string): bool {
    this.problem = message;
    this.problemParam = param;
    return false;
  }

  /** Stops the scan from inside member(): setting `error` aborts it. */
  private rejectMember(message: string, param: string): void {
    this.reject(message, param);
    this.error = message;
  }
}
