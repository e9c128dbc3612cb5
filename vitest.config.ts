import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts", "assembly/**/*.test.ts"],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // End-to-end files each start an Envoy; two cores cannot run many at once.
    maxWorkers: 2,
  },
});
