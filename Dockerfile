# Two images from one build of the project, so both ends of the snapshot
# protocol always match:
#
# - llm-gateway:<version of package.json> (target gateway, the default): the
#   product only, the metrics aggregator and the step that hands Envoy its
#   files (llm-gateway-envoy-init: the Wasm filter and the bootstrap rendered
#   for it) for the official envoyproxy/envoy image to run.
# - llm-gateway-fake-fleet:<version> (target fake-fleet): the fake model
#   servers, for trying the stack without GPUs (docker-compose.yml).
#
# It packs the project as built on the host, so build first:
#   npm ci && npm run build && docker build -t llm-gateway:0.1.0 .
FROM node:20-bookworm-slim AS runtime

WORKDIR /app
ENV NODE_ENV=production

# Runtime dependencies only; in their own layer, so a code change reuses it.
# No install scripts: none of the runtime dependencies needs one.
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund && npm cache clean --force
# The product's Node code, and the contract (header names, priority codes, limits) it reads at start.
COPY proto/ proto/
COPY dist/host/ dist/host/

FROM runtime AS fake-fleet
# The fake pods and the engine model they serve; nothing else of testing/.
COPY dist/testing/fakeserver/ dist/testing/fakeserver/
COPY dist/testing/engine/ dist/testing/engine/
USER 1000:1000
CMD ["node", "dist/testing/fakeserver/main.js", "--config", "/etc/llm-gateway/config.yaml", "--fleet", "/etc/llm-gateway/fleet.yaml", "--host", "0.0.0.0"]

FROM runtime AS gateway
COPY envoy/gateway.yaml envoy/
COPY build/filter.wasm build/
COPY deploy/envoy-init.sh /usr/local/bin/llm-gateway-envoy-init
# Where docker-compose.yml mounts the volume the init step fills: a new named
# volume takes this folder's owner, so the node user may write it.
RUN mkdir /envoy-config && chown node:node /envoy-config

# The node user of the base image; nothing in /app is writable by it.
USER 1000:1000
CMD ["node", "dist/host/aggregator/main.js", "--config", "/etc/llm-gateway/config.yaml"]
