// The names and numbers the Envoy filter and the Node side must agree on,
// read from proto/contract.json: the filter compiles in the module
// scripts/gen-contract.mjs writes from the same file.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { projectRoot } from "./paths.js";

export const contractPath = join(projectRoot, "proto", "contract.json");

// Header names are put into Envoy's YAML and compared byte for byte by the filter: lower-case tokens only.
const headerName = z.string().regex(/^[a-z0-9-]+$/);
const code = z.number().int().min(0);

const contractSchema = z.object({
  gatewayHeaderPrefix: headerName,
  headers: z.strictObject({
    pool: headerName,
    modelName: headerName,
    baseModel: headerName,
    decision: headerName,
    claimCritical: headerName,
    claimDebug: headerName,
    destinationEndpoint: headerName,
    stream: headerName,
    reply: headerName,
    priority: headerName,
    debug: headerName,
    claimTenant: headerName,
    tenant: headerName,
    maxWait: headerName,
  }),
  priorities: z.strictObject({ standard: code, critical: code, sheddable: code }),
  limits: z.strictObject({ maxBodyBytes: z.number().int().min(1).max(2 ** 31 - 1) }),
});

export type Contract = z.infer<typeof contractSchema>;

export const CONTRACT: Contract = contractSchema.parse(JSON.parse(readFileSync(contractPath, "utf8")));
