#!/bin/sh
# The Envoy init step, run from the llm-gateway image before Envoy starts:
# writes this image's Wasm filter and the Envoy bootstrap rendered from the
# gateway config into DIR, a volume the Envoy container mounts at the same
# path (the bootstrap names the filter by its path in DIR).
#   llm-gateway-envoy-init CONFIG DIR   ->   DIR/filter.wasm, DIR/envoy.yaml
# LLM_GATEWAY_HOME: the built project (default /app, where the image has it).
set -eu
if [ $# -ne 2 ]; then
  echo "usage: llm-gateway-envoy-init CONFIG DIR" >&2
  exit 2
fi
config=$1
dir=$2
home=${LLM_GATEWAY_HOME:-/app}
cp "$home/build/filter.wasm" "$dir/filter.wasm"
exec node "$home/dist/host/envoy/render-main.js" --config "$config" --out "$dir/envoy.yaml" --wasm "$dir/filter.wasm"
