// Writes deploy/kubernetes/base/crd.yaml from the config schema (host/kubernetes/crd.ts).
// Run by `npm run gen:crd` after a change to host/config.ts; test/tools/crd.test.ts fails while it is stale.
import { writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { configCrdYaml } from "../dist/host/kubernetes/crd-yaml.js";

const out = fileURLToPath(new URL("../deploy/kubernetes/base/crd.yaml", import.meta.url));
writeFileSync(out, configCrdYaml());
console.log(`wrote ${out}`);
