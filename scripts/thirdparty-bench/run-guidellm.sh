#!/usr/bin/env bash
# Drives an already running gateway (or any OpenAI-compatible server) with
# guidellm, a load generator that is not ours, so the bench's own client is
# not the only witness of its latencies. It starts nothing but guidellm: start
# the gateway and its pods first (docs/benchmarks.md, "Third-party load
# generators").
#
#   bash scripts/thirdparty-bench/run-guidellm.sh http://127.0.0.1:8080 tiny-llama [label]
#
# Knobs (environment): RATE (req/s, constant arrivals, default 2), DURATION
# (default 60), PROMPT_TOKENS (256), OUTPUT_TOKENS (32), OUT (results folder),
# VALIDATE=false to skip guidellm's GET /health probe (the bench's plain-Envoy
# baselines route only the completion paths, so their /health answers 503).
set -euo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: $0 GATEWAY_URL MODEL [LABEL]   (GATEWAY_URL without /v1, e.g. http://127.0.0.1:8080)" >&2
  exit 2
fi
url=${1%/}
url=${url%/v1} # guidellm appends /v1/... itself
model=$2
label=${3:-run}

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${THIRDPARTY_BENCH_CACHE:-$HOME/.cache/thirdparty-bench}
venv=$cache/venv
tokenizer=$cache/tokenizer
out=${OUT:-$cache/results/guidellm-$label-$(date -u +%Y%m%dT%H%M%SZ)}

# The hub is not reachable here: fail fast instead of hanging on downloads.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

# A venv of its own: guidellm pulls in torch and transformers, which the
# gateway never needs.
if [[ ! -x $venv/bin/guidellm ]]; then
  echo "[guidellm] creating $venv (guidellm 0.8.1; a few GB, once)"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q guidellm==0.8.1 tokenizers transformers
fi

# guidellm counts and cuts prompts with a Hugging Face tokenizer; no model's
# own can be downloaded, so a small one is built offline (approximate counts).
if [[ ! -f $tokenizer/tokenizer.json ]]; then
  echo "[guidellm] building the offline tokenizer in $tokenizer"
  "$venv/bin/python" "$here/make-tokenizer.py" "$tokenizer"
fi

mkdir -p "$out"
echo "[guidellm] $url model=$model rate=${RATE:-2}/s for ${DURATION:-60}s," \
  "prompt ${PROMPT_TOKENS:-256} / output ${OUTPUT_TOKENS:-32} tokens -> $out"

# Constant arrivals for a fixed time, streamed chat completions (TTFT and ITL
# need streaming); max_errors stops a run against a dead target early.
"$venv/bin/guidellm" run \
  --backend "kind=openai_http,target=$url,model=$model,validate_backend=${VALIDATE:-true}" \
  --tokenizer "kind=huggingface_auto,model=$tokenizer" \
  --data "kind=synthetic_text,prompt_tokens=${PROMPT_TOKENS:-256},output_tokens=${OUTPUT_TOKENS:-32}" \
  --profile "kind=constant,rate=${RATE:-2}" \
  --constraint "kind=max_duration,seconds=${DURATION:-60}" \
  --constraint "kind=max_errors,count=50" \
  --seed "kind=static,value=42" \
  --output "kind=json,path=$out/benchmarks.json" \
  --output "kind=csv,path=$out/benchmarks.csv" \
  --output "kind=console" \
  --disable-progress \
  --label "target=$label"

echo "[guidellm] done: $out/benchmarks.json"
