// What the scorers may know about the request being routed.
import { ModelRoute } from "./snapshot";

export class RouteRequest {
  model: ModelRoute = new ModelRoute();
  /** The raw JSON bytes of `messages` / `prompt`, for prefix affinity. */
  promptPtr: usize = 0;
  promptLen: i32 = 0;
  /** The caller's clock, for ejection deadlines. */
  nowMs: u64 = 0;
}
