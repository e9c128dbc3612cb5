# The project's images, built from the sources alone: a fresh clone builds
# them (the build context holds no dist/, build/ or node_modules/).
#
#   docker build -t llm-gateway:0.1.0 .
#
# - llm-gateway:<version of package.json> (target gateway, the default and
#   last): the product only, the metrics aggregator and the step that hands
#   Envoy its files (llm-gateway-envoy-init: the Wasm filter and the bootstrap
#   rendered for it) for the official envoyproxy/envoy image to run.
# - llm-gateway-fake-fleet:<version> (target fake-fleet, never the default):
#   the fake model servers, for trying the stack without GPUs
#   (docker-compose.yml). A target here rather than a Dockerfile of its own so
#   that both ends of the snapshot protocol come from one build; nothing of it
#   is in the gateway image, and the Kubernetes manifests never run it.

# Compiles the filter (AssemblyScript) and the host code (TypeScript) with the
# dev dependencies; only its outputs leave this stage.
FROM node:24-bookworm-slim AS build
WORKDIR /src
COPY package.json package-lock.json ./
# No install scripts: compiling needs none. No optional dependencies: the only
# one is a Node binary for machines whose own Node is older, and this image
# has Node 24.
RUN npm ci --omit=optional --ignore-scripts --no-audit --no-fund
COPY asconfig.json tsconfig.json ./
COPY scripts/gen-contract.mjs scripts/
COPY proto/ proto/
COPY assembly/ assembly/
COPY host/ host/
COPY testing/ testing/
COPY bench/ bench/
COPY fuzz/ fuzz/
RUN npm run build

# What both images run on: Node 24, the runtime dependencies and the
# product's Node code with the contract (header names, priority codes,
# limits) it reads at start.
FROM node:24-bookworm-slim AS runtime
WORKDIR /app
ENV NODE_ENV=production
# In their own layer, so a code change reuses it.
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --omit=optional --ignore-scripts --no-audit --no-fund && npm cache clean --force
COPY proto/ proto/
COPY --from=build /src/dist/host/ dist/host/

FROM runtime AS fake-fleet
# The fake pods and the engine model they serve; nothing else of testing/.
COPY --from=build /src/dist/testing/fakeserver/ dist/testing/fakeserver/
COPY --from=build /src/dist/testing/engine/ dist/testing/engine/
USER 1000:1000
CMD ["node", "dist/testing/fakeserver/main.js", "--config", "/etc/llm-gateway/config.yaml", "--fleet", "/etc/llm-gateway/fleet.yaml", "--host", "0.0.0.0"]

FROM runtime AS gateway
COPY envoy/gateway.yaml envoy/
COPY --from=build /src/build/filter.wasm build/
COPY deploy/envoy-init.sh /usr/local/bin/llm-gateway-envoy-init
# Where docker-compose.yml mounts the volume the init step fills: a new named
# volume takes this folder's owner, so the node user may write it.
RUN mkdir /envoy-config && chown node:node /envoy-config

# The node user of the base image; nothing in /app is writable by it.
USER 1000:1000
CMD ["node", "dist/host/aggregator/main.js", "--config", "/etc/llm-gateway/config.yaml"]
