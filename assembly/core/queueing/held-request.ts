// A request the gateway holds while its pool has no room for its class: what
// the picker needs to place it later (late binding: the pod is chosen when
// it is dispatched, on the view of that moment), and where it sits in its
// class's queue.
import { ModelRoute } from "../fleet/snapshot";
import { RouteRequest } from "../scorers/route-request";

export class HeldRequest {
  /** The holder's handle: the filter's stream context id, the simulator's request index. */
  id: u32 = 0;
  tenant: u64 = 0;
  /** The body's size: held in Envoy's buffer, counted against the queued-bytes bound. */
  bytes: i32 = 0;
  /** When it was held. */
  heldMs: u64 = 0;
  /** When it counts as arrived, for its place in line: when it was held, or a budget earlier for a retry. */
  arrivalMs: u64 = 0;
  /** Its start tag in its class's fair queue (fair-queue.ts): the smallest is released first. */
  tag: u64 = 0;
  /** Past this the request is refused rather than held on (its class's wait budget, or the client's tighter deadline). */
  deadlineMs: u64 = 0;
  /** The model the client asked for (the request's `model` may be a canary split's target). */
  requested: ModelRoute = new ModelRoute();
  /** Its own copy: the router's is reused for the next request. */
  readonly request: RouteRequest = new RouteRequest();
  /** Hash of its body: a refusal remembers it, so its retry is known (core/fleet/refusals.ts). */
  body: u64 = 0;
  /** The explanation was asked for. */
  explain: bool = false;
  /** The next request of the same tenant and class. */
  next: HeldRequest | null = null;
}
