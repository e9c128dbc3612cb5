// Envoy's API for the ADS server: the AggregatedDiscoveryService definition
// and the encoding of resources given in the form the Envoy template is
// written in (proto3 JSON: "1s" durations, bare numbers for wrapped ones,
// "@type" inside Any). protobufjs's own fromObject knows none of that and
// drops unknown fields silently, so resources are converted field by field
// against the message types here, and a field or enum value the API does
// not have is an error at render time rather than a NACK from Envoy.
//
// Envoy's API protos ship with @grpc/grpc-js-xds; nothing is copied here.
// That copy lacks a few extensions (override_host among them): an Any of a
// type it does not hold is sent as an xds.type.v3.TypedStruct, which Envoy
// converts to the real type with its own descriptors.
import type * as grpc from "@grpc/grpc-js";
import { accessSync, constants } from "node:fs";
import { createRequire } from "node:module";
import { dirname, isAbsolute, join } from "node:path";
import protobuf from "protobufjs";

const PROTO_ROOT = join(dirname(createRequire(import.meta.url).resolve("@grpc/grpc-js-xds/package.json")), "deps");
const INCLUDE_DIRS = ["envoy-api", "xds", "googleapis", "protoc-gen-validate"].map((d) => join(PROTO_ROOT, d));

const PROTO_FILES = [
  "envoy/service/discovery/v3/ads.proto",
  "envoy/config/endpoint/v3/endpoint.proto",
  "envoy/config/cluster/v3/cluster.proto",
  "envoy/config/route/v3/route.proto",
  "xds/type/v3/typed_struct.proto",
  // Extensions the template's clusters and routes configure.
  "envoy/extensions/load_balancing_policies/least_request/v3/least_request.proto",
  "envoy/extensions/retry/host/previous_hosts/v3/previous_hosts.proto",
  "envoy/extensions/filters/http/local_ratelimit/v3/local_rate_limit.proto",
];

const TYPE_PREFIX = "type.googleapis.com/";
const TYPED_STRUCT = `${TYPE_PREFIX}xds.type.v3.TypedStruct`;

// Loaded once, on first use: parsing Envoy's API takes a few tenths of a second.
let loaded: protobuf.Root | undefined;
function root(): protobuf.Root {
  if (loaded) return loaded;
  // Envoy's protos import descriptor.proto for their options; protobufjs
  // ships it as JSON but does not register it as a built-in file.
  const descriptor = createRequire(import.meta.url)("protobufjs/google/protobuf/descriptor.json");
  protobuf.common("descriptor", descriptor.nested.google.nested.protobuf.nested);
  const r = new protobuf.Root();
  r.resolvePath = (_origin, target) => {
    if (isAbsolute(target)) return target;
    for (const dir of INCLUDE_DIRS) {
      try {
        accessSync(join(dir, target), constants.R_OK);
        return join(dir, target);
      } catch {
        // not in this include dir
      }
    }
    return target; // protobufjs's built-in google/protobuf files
  };
  r.loadSync(PROTO_FILES, { keepCase: true });
  r.resolveAll();
  loaded = r;
  return r;
}

/** The fields of envoy.service.discovery.v3.DiscoveryRequest used here (proto field names). */
export interface DiscoveryRequest {
  version_info?: string;
  node?: { id?: string; cluster?: string };
  resource_names?: string[];
  type_url?: string;
  response_nonce?: string;
  error_detail?: { code?: number; message?: string };
}

/** An encoded resource: what goes into DiscoveryResponse.resources. */
export interface EncodedAny {
  type_url: string;
  value: Uint8Array;
}

export interface DiscoveryResponse {
  version_info: string;
  type_url: string;
  nonce: string;
  /** Written as encoded Anys; read back (test clients) as objects carrying "@type". */
  resources: Array<EncodedAny | Record<string, unknown>>;
}

/** How decoded messages look: proto field names, Anys of known types opened up with "@type". */
const TO_OBJECT: protobuf.IConversionOptions = { longs: String, enums: String, defaults: false, json: true };

function codec<T>(typeName: string) {
  const type = root().lookupType(typeName);
  return {
    serialize: (value: T) => Buffer.from(type.encode(type.fromObject(value as object)).finish()),
    deserialize: (bytes: Buffer) => type.toObject(type.decode(bytes), TO_OBJECT) as T,
  };
}

let adsDefinition: grpc.ServiceDefinition | undefined;
/** envoy.service.discovery.v3.AggregatedDiscoveryService, state of the world only (the delta method is left unimplemented). */
export function adsServiceDefinition(): grpc.ServiceDefinition {
  if (adsDefinition) return adsDefinition;
  const request = codec<DiscoveryRequest>("envoy.service.discovery.v3.DiscoveryRequest");
  const response = codec<DiscoveryResponse>("envoy.service.discovery.v3.DiscoveryResponse");
  adsDefinition = {
    StreamAggregatedResources: {
      path: "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources",
      requestStream: true,
      responseStream: true,
      requestSerialize: request.serialize,
      requestDeserialize: request.deserialize,
      responseSerialize: response.serialize,
      responseDeserialize: response.deserialize,
      originalName: "streamAggregatedResources",
    },
  } as grpc.ServiceDefinition;
  return adsDefinition;
}

/**
 * Encodes a resource written in proto3 JSON (e.g. a cluster from the
 * rendered template) as an Any of `typeUrl`. Throws, naming the path, on a
 * field the message does not have or a value of the wrong kind.
 */
export function encodeResource(typeUrl: string, json: Record<string, unknown>): EncodedAny {
  const type = root().lookupType(typeUrl.slice(typeUrl.lastIndexOf("/") + 1));
  const message = type.fromObject(fromJson(type, json, type.name));
  return { type_url: typeUrl, value: type.encode(message).finish() };
}

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

const WRAPPERS = new Set(
  ["Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String", "Bytes"].map((t) => `.google.protobuf.${t}Value`),
);

/** A message in proto3 JSON -> the object protobufjs's fromObject takes. */
function fromJson(type: protobuf.Type, json: unknown, path: string): Record<string, unknown> {
  if (json === null || typeof json !== "object" || Array.isArray(json)) throw new Error(`${path}: expected a ${type.name} object`);
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(json)) {
    const field = type.fields[key];
    if (!field) throw new Error(`${path}.${key}: ${type.fullName.slice(1)} has no field ${key}`);
    field.resolve();
    const at = `${path}.${key}`;
    if (field.map) {
      if (value === null || typeof value !== "object") throw new Error(`${at}: expected a map`);
      out[key] = Object.fromEntries(Object.entries(value).map(([k, v]) => [k, fieldValue(field, v, `${at}.${k}`)]));
    } else if (field.repeated) {
      if (!Array.isArray(value)) throw new Error(`${at}: expected a list`);
      out[key] = value.map((v, i) => fieldValue(field, v, `${at}[${i}]`));
    } else {
      out[key] = fieldValue(field, value, at);
    }
  }
  return out;
}

function fieldValue(field: protobuf.Field, value: unknown, path: string): unknown {
  const t = field.resolvedType;
  if (t instanceof protobuf.Type) return messageValue(t, value, path);
  if (t instanceof protobuf.Enum) {
    if (typeof value === "string" ? !(value in t.values) : !Number.isInteger(value)) {
      throw new Error(`${path}: ${JSON.stringify(value)} is no value of ${t.fullName.slice(1)}`);
    }
    return value;
  }
  const ok =
    field.type === "string" ? typeof value === "string" :
    field.type === "bool" ? typeof value === "boolean" :
    field.type === "bytes" ? typeof value === "string" :
    typeof value === "number" || (typeof value === "string" && /^-?\d+$/.test(value));
  if (!ok) throw new Error(`${path}: expected a ${field.type}, got ${JSON.stringify(value)}`);
  return value;
}

function messageValue(type: protobuf.Type, value: unknown, path: string): unknown {
  const name = type.fullName;
  if (name === ".google.protobuf.Duration") return duration(value, path);
  if (WRAPPERS.has(name)) return { value: fieldValue(type.fields.value, value, path) };
  if (name === ".google.protobuf.Any") return anyValue(value, path);
  if (name === ".google.protobuf.Struct") return structValue(value, path);
  return fromJson(type, value, path);
}

/** "1.5s" -> { seconds, nanos }. */
function duration(value: unknown, path: string): { seconds: number; nanos: number } {
  const m = typeof value === "string" ? /^(\d+)(?:\.(\d{1,9}))?s$/.exec(value) : null;
  if (!m) throw new Error(`${path}: expected a duration such as "1s" or "0.5s", got ${JSON.stringify(value)}`);
  return { seconds: Number(m[1]), nanos: Number((m[2] ?? "").padEnd(9, "0")) };
}

/** "@type" plus the fields: the type's own encoding when its proto is loaded, else a TypedStruct. */
function anyValue(value: unknown, path: string): Record<string, unknown> {
  const { "@type": typeUrl, ...fields } = (value ?? {}) as Record<string, unknown>;
  if (typeof typeUrl !== "string") throw new Error(`${path}: expected an Any with "@type"`);
  const known = root().lookup(typeUrl.slice(typeUrl.lastIndexOf("/") + 1));
  if (known instanceof protobuf.Type) return { "@type": typeUrl, ...fromJson(known, fields, path) };
  return { "@type": TYPED_STRUCT, type_url: typeUrl, value: structValue(fields, path) };
}

function structValue(value: unknown, path: string): { fields: Record<string, unknown> } {
  if (value === null || typeof value !== "object" || Array.isArray(value)) throw new Error(`${path}: expected an object`);
  return { fields: Object.fromEntries(Object.entries(value).map(([k, v]) => [k, jsonValue(v as Json, `${path}.${k}`)])) };
}

/** google.protobuf.Value (protobufjs's built-in well-known types name their fields in camelCase). */
function jsonValue(value: Json, path: string): Record<string, unknown> {
  if (value === null) return { nullValue: "NULL_VALUE" };
  if (typeof value === "boolean") return { boolValue: value };
  if (typeof value === "number") return { numberValue: value };
  if (typeof value === "string") return { stringValue: value };
  if (Array.isArray(value)) return { listValue: { values: value.map((v, i) => jsonValue(v, `${path}[${i}]`)) } };
  return { structValue: structValue(value, path) };
}
