// gateway.accessLog and gateway.tracing: Envoy's own access log and
// OpenTelemetry tracer, fed by the headers the filter sets.
import * as z from "zod";
import { msg } from "../validation.js";

export interface AccessLogConfig {
  /** The file each request's JSON line is appended to; absent, Envoy's stdout (a container's log). */
  path?: string;
}

export interface TracingConfig {
  /** The OTLP/gRPC collector (an IP or a DNS name) and its port. */
  host: string;
  port: number;
  /** The spans' service.name. */
  serviceName: string;
  /** Share of requests traced, 0-100 (Envoy's random_sampling). */
  samplingPercent: number;
}

const NAME_TEXT = "expected a non-empty string without whitespace";
const word = z.string({ error: msg(NAME_TEXT) }).regex(/^\S+$/, { error: NAME_TEXT });

export const accessLogSchema = z.strictObject({
  path: z.string({ error: msg("expected an absolute file path") }).regex(/^\/\S*$/, { error: "expected an absolute file path" }).optional(),
});

export const tracingSchema = z.strictObject({
  host: word,
  port: z.number({ error: msg("expected a port 1..65535") }).int().min(1).max(65535),
  serviceName: word.default("llm-gateway"),
  samplingPercent: z.number({ error: msg("expected a number 0..100") }).min(0).max(100).default(1),
});
