// What Envoy sees of leadership on the gRPC port: grpc.health.v1.Health
// answers SERVING on the leader and NOT_SERVING on a standby (Envoy's
// active health check on the control-plane cluster, so its snapshot link
// and ADS connect to the leader only), a standby refuses the streams
// themselves with UNAVAILABLE naming the leader, and an aggregator that
// stops leading ends the streams it holds, so their Envoys reconnect to the
// new leader.
import * as grpc from "@grpc/grpc-js";
import type { Leadership } from "./leadership.js";

type Service = { definition: grpc.ServiceDefinition; implementation: grpc.UntypedServiceImplementation };
type DuplexCall = grpc.ServerDuplexStream<unknown, unknown>;

// grpc.health.v1.HealthCheckResponse.ServingStatus
const SERVING = 1;
const NOT_SERVING = 2;

/** Health/Check: the request's service name is not read (one answer for the whole port); the response is { status }. */
export const healthCheckDefinition: grpc.ServiceDefinition = {
  Check: {
    path: "/grpc.health.v1.Health/Check",
    requestStream: false,
    responseStream: false,
    requestSerialize: (service: string) => {
      const name = Buffer.from(service, "utf8");
      return name.length === 0 ? Buffer.alloc(0) : Buffer.concat([Buffer.from([0x0a, name.length]), name]);
    },
    requestDeserialize: () => ({}),
    responseSerialize: (status: number) => Buffer.from([0x08, status]),
    responseDeserialize: (bytes: Buffer) => (bytes.length >= 2 && bytes[0] === 0x08 ? bytes[1] : 0),
  },
};

export interface StandbyGate {
  /** The streaming services, refused while this aggregator stands by. */
  wrap(services: readonly Service[]): Service[];
  /** grpc.health.v1.Health, to register beside them. */
  readonly health: Service;
}

export function standbyGate(leadership: () => Leadership, log: (line: string) => void): StandbyGate {
  const open = new Set<DuplexCall>();
  let watching: Leadership | null = null;

  /** Ends every held stream once this aggregator stops leading. */
  function follow(current: Leadership): void {
    if (watching === current) return;
    watching = current;
    current.onChange((leading) => {
      if (leading || open.size === 0) return;
      log(`no longer leading: ending ${open.size} streams (the leader is ${current.leader() ?? "not known yet"})`);
      for (const call of [...open]) call.emit("error", { code: grpc.status.UNAVAILABLE, details: "this aggregator no longer leads" });
      open.clear();
    });
  }

  const wrap = (method: string, handler: (call: DuplexCall) => void) => (call: DuplexCall) => {
    const current = leadership();
    follow(current);
    if (!current.leading()) {
      const leader = current.leader();
      log(`refused a ${method} stream from ${call.getPeer()}: standing by (the leader is ${leader ?? "not known yet"})`);
      call.emit("error", { code: grpc.status.UNAVAILABLE, details: `standby aggregator: the leader is ${leader ?? "not known yet"}` });
      return;
    }
    open.add(call);
    const forget = () => open.delete(call);
    call.on("close", forget);
    call.on("cancelled", forget);
    call.on("error", forget);
    call.on("finish", forget);
    handler(call);
  };

  return {
    wrap: (services) =>
      services.map(({ definition, implementation }) => ({
        definition,
        implementation: Object.fromEntries(
          Object.entries(implementation).map(([method, handler]) => [method, wrap(method, handler as (call: DuplexCall) => void)]),
        ) as grpc.UntypedServiceImplementation,
      })),
    health: {
      definition: healthCheckDefinition,
      implementation: {
        Check: (_call: grpc.ServerUnaryCall<unknown, number>, callback: grpc.sendUnaryData<number>) => callback(null, leadership().leading() ? SERVING : NOT_SERVING),
      },
    },
  };
}
