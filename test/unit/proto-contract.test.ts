// The snapshot protocol is written three times: proto/gateway.proto, the
// hand-written decoder the filter runs (assembly/core/fleet/snapshot.ts) and the
// message interfaces Node builds snapshots with (host/proto.ts). This test
// reads the .proto by reflection and holds the other two to it: a snapshot in
// which every field has a value of its own goes through the Node encoder into
// the native router, and each value must come out of the decoder unchanged. A
// field added to the .proto without an expected value here (and so without a
// decoder that reads it) fails, naming the field.
import protobuf from "protobufjs";
import { beforeAll, describe, expect, it } from "vitest";
import { NativeRouter } from "../../testing/native/router.js";
import { protoPath } from "../../host/paths.js";
import { encodeSnapshot, MESSAGE_FIELDS, PRIORITY_WIRE, type SnapshotMsg } from "../../host/proto.js";

const root = protobuf.loadSync(protoPath).resolveAll();
const pkg = root.lookup("llmgateway.v1") as protobuf.Namespace;
const snapshotType = root.lookupType("llmgateway.v1.Snapshot");

/**
 * What each scalar field of the snapshot carries in the test snapshot: none
 * is its default, and within a message no two are alike, so a field the
 * decoder skips or reads into another's place shows. Floats are exact in
 * float32. Indices point at the second element of each repeated message
 * (there are two of each), so an index read as 0 shows too.
 */
const EXPECTED: Record<string, Record<string, unknown>> = {
  Snapshot: { version: 987_654_321, generatedUnixMs: 1_700_000_000_123 },
  Model: { name: "chat-model", pool: 1, adapter: "sql-lora", profile: 1, priority: PRIORITY_WIRE.sheddable },
  Split: { model: 1, weight: 3 },
  // Weights are a map by scorer name: every registered scorer's, and one this build has no scorer for.
  Profile: { name: "batchy", weights: { queue: 0.5, kvCache: 1.25, running: 2.75, lora: 3.5, prefix: 4.125, unknownScorer: 6.5 } },
  Deadlines: { firstByteMs: 1500, promptMsPerKtoken: 250, outputMsPerToken: 35, assumedOutputTokens: 512 },
  Admission: { enabled: true, maxWaiting: 12.5, maxKvCache: 0.875, sheddableFactor: 0.375, criticalFactor: 3.25, maxRetryAfterS: 42,
    waitCriticalMs: 41_000, waitStandardMs: 17_000, waitSheddableMs: 3_000 },
  Pool: { name: "pool-a", baseModel: "base-model", weights: { queue: 1.5, kvCache: 0.25, running: 0.75, lora: 5.5, prefix: 2.125 } },
  Endpoint: {
    address: "10.0.0.7:8000", waiting: 7, running: 11, kvCacheUsage: 0.625, fresh: true, maxLora: 5,
    runningAdapters: ["run-a", "run-b"], waitingAdapters: ["wait-a"], capacity: 2.5, kvTokens: 123_456, batchSlots: 48,
  },
};

/** Fields a snapshot's decoder never sees: the link takes a message carrying them for itself (assembly/gateway/peer-share.ts). */
const LINK_FIELDS = new Set(["Snapshot.peerInflight", "Snapshot.replicaIndex", "Snapshot.replicaCount", "Snapshot.peerPrefixRecords", "Snapshot.peerQueues", "Snapshot.peerEjections"]);
const forDecoder = (type: protobuf.Type) => type.fieldsArray.filter((f) => !LINK_FIELDS.has(`${type.name}.${f.name}`));

/** Every message type the snapshot holds, itself included. */
function messageTypes(type: protobuf.Type, seen = new Map<string, protobuf.Type>()): Map<string, protobuf.Type> {
  seen.set(type.name, type);
  for (const field of type.fieldsArray) {
    if (field.resolvedType instanceof protobuf.Type && !seen.has(field.resolvedType.name)) messageTypes(field.resolvedType, seen);
  }
  return seen;
}

const snapshotTypes = messageTypes(snapshotType);
const isMessage = (f: protobuf.Field) => f.resolvedType instanceof protobuf.Type;

/** Element `i` of a repeated message: its strings marked with `i`, so elements cannot be confused either. */
function sample(type: protobuf.Type, i: number): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const f of forDecoder(type)) {
    if (isMessage(f)) {
      const inner = f.resolvedType as protobuf.Type;
      out[f.name] = f.repeated ? [sample(inner, 0), sample(inner, 1)] : sample(inner, 0);
    } else {
      const v = EXPECTED[type.name]?.[f.name];
      out[f.name] = typeof v === "string" && i > 0 ? `${v}-${i}` : v;
    }
  }
  return out;
}

const isDefault = (v: unknown) => v === undefined || v === 0 || v === "" || v === false || (Array.isArray(v) && v.length === 0);

let router: NativeRouter;

beforeAll(async () => {
  router = await NativeRouter.load();
});

describe("snapshot protocol contract", () => {
  it("has a distinctive expected value for every scalar field of every message in the snapshot", () => {
    const missing: string[] = [];
    for (const [name, type] of snapshotTypes) {
      for (const f of forDecoder(type)) {
        if (!isMessage(f) && isDefault(EXPECTED[name]?.[f.name])) missing.push(`${name}.${f.name} (field ${f.id})`);
      }
    }
    // A field listed here is in the .proto but not in this test: teach the decoder
    // (assembly/core/fleet/snapshot.ts) and snapshotJson (assembly/native/snapshot-json.ts) to read it, then add its value to EXPECTED.
    expect(missing, `.proto fields the decoder is not held to: ${missing.join(", ")}`).toEqual([]);
    for (const [name, fields] of Object.entries(EXPECTED)) {
      const type = snapshotTypes.get(name);
      expect(type, `EXPECTED names message ${name}, which the snapshot does not hold`).toBeDefined();
      for (const field of Object.keys(fields)) expect(type!.fields[field], `EXPECTED names ${name}.${field}, not in the .proto`).toBeDefined();
    }
  });

  it("brings every field's value through the Node encoder and the filter's decoder", () => {
    const sent = sample(snapshotType, 0);
    router.reset(1);
    router.setSnapshot(encodeSnapshot(sent as unknown as SnapshotMsg));
    const got = router.installedSnapshot();
    const mismatches: string[] = [];
    const compare = (type: protobuf.Type, want: Record<string, unknown>, have: unknown, path: string) => {
      if (typeof have !== "object" || have === null) {
        mismatches.push(`${path} (${type.name}): missing from the decoded snapshot`);
        return;
      }
      const decoded = have as Record<string, unknown>;
      for (const f of forDecoder(type)) {
        const at = `${path}.${f.name}`;
        const label = `${type.name}.${f.name} (field ${f.id}) at ${at}`;
        if (!(f.name in decoded)) {
          mismatches.push(`${label}: not in the decoded snapshot`);
        } else if (isMessage(f) && f.repeated) {
          const items = decoded[f.name] as unknown[];
          const wanted = want[f.name] as Record<string, unknown>[];
          if (!Array.isArray(items) || items.length !== wanted.length) mismatches.push(`${label}: sent ${wanted.length} items, decoded ${JSON.stringify(items)}`);
          else wanted.forEach((w, k) => compare(f.resolvedType as protobuf.Type, w, items[k], `${at}[${k}]`));
        } else if (isMessage(f)) {
          compare(f.resolvedType as protobuf.Type, want[f.name] as Record<string, unknown>, decoded[f.name], at);
        } else if (JSON.stringify(decoded[f.name]) !== JSON.stringify(want[f.name])) {
          mismatches.push(`${label}: sent ${JSON.stringify(want[f.name])}, decoded ${JSON.stringify(decoded[f.name])}`);
        }
      }
      const extra = Object.keys(decoded).filter((k) => !type.fields[k]);
      if (extra.length > 0) mismatches.push(`${path} (${type.name}): decoded fields not in the .proto: ${extra.join(", ")}`);
    };
    compare(snapshotType, sent, got, "snapshot");
    expect(mismatches, mismatches.join("\n")).toEqual([]);
  });

  it("types every .proto message in host/proto.ts with exactly the .proto's field names", () => {
    const messages = pkg.nestedArray.filter((n): n is protobuf.Type => n instanceof protobuf.Type);
    for (const type of messages) {
      const names = type.fieldsArray.map((f) => f.name).sort();
      expect(MESSAGE_FIELDS[type.name], `host/proto.ts has no interface fields for message ${type.name}`).toBeDefined();
      const typed = new Set(MESSAGE_FIELDS[type.name]);
      const untyped = names.filter((n) => !typed.has(n)).map((n) => `${type.name}.${n}`);
      expect(untyped, `.proto fields host/proto.ts's interfaces lack: ${untyped.join(", ")}`).toEqual([]);
      expect([...typed].sort(), `host/proto.ts's ${type.name} has fields the .proto does not`).toEqual(names);
    }
    expect(Object.keys(MESSAGE_FIELDS).sort()).toEqual(messages.map((t) => t.name).sort());
  });

  it("numbers the priority classes as the .proto's Priority enum does", () => {
    const values = root.lookupEnum("llmgateway.v1.Priority").values;
    expect(Object.fromEntries(Object.entries(values).map(([k, v]) => [k.toLowerCase(), v]))).toEqual(PRIORITY_WIRE);
  });
});
