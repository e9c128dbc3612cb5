// The text of deploy/kubernetes/base/crd.yaml: the generated CRD with a header saying so.
import { stringify } from "yaml";
import { configCrd } from "./crd.js";

const HEADER = "# Generated from the config schema (host/config.ts) by `npm run gen:crd`: do not edit.\n";

export function configCrdYaml(): string {
  return HEADER + stringify(configCrd(), { lineWidth: 0 });
}
