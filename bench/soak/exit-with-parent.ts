// Preloaded (node --import) into every process the soak starts, so none
// outlives it: the IPC channel the soak opens to each child closes when the
// soak exits, however it exits (SIGKILL included), and the child then stops
// as on SIGTERM, through its own shutdown handler.
if (process.channel) {
  // The channel carries no messages; it must not keep the child alive by itself.
  process.channel.unref();
  process.once("disconnect", () => process.kill(process.pid, "SIGTERM"));
}
