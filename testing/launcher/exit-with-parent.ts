// Preloaded (node --import) into every process node-child.ts starts, so none
// outlives its parent: the IPC channel the parent opens to each child closes
// when the parent exits, however it exits (SIGKILL included), and the child
// then stops as on SIGTERM, through its own shutdown handler.
if (process.channel) {
  // The channel carries no messages; it must not keep the child alive by itself.
  process.channel.unref();
  process.once("disconnect", () => process.kill(process.pid, "SIGTERM"));
}
