#!/usr/bin/env bash
# Runs this example for real and checks what its README promises: the
# gateway starts on gateway.yaml with the fake pods of fleet.yaml, routes an
# OpenAI chat completion to one of them, lists the pool's models, answers an
# unknown model with an OpenAI-format 404, and stops cleanly on SIGTERM.
# Needs the project built (npm run build; npm test does it).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
url=http://127.0.0.1:18080
log=$(mktemp)
fail() {
  echo "verify own-pods: $*" >&2
  sed 's/^/  | /' "$log" >&2
  exit 1
}

cd "$root"
# The Node npm scripts run on: the bundled Node 24 where npm installed it.
node=$root/node_modules/.bin/node
[ -x "$node" ] || node=node
"$node" scripts/start.mjs --config "$here/gateway.yaml" --fleet "$here/fleet.yaml" >"$log" 2>&1 &
pid=$!
trap 'kill -TERM "$pid" 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 1 120); do
  grep -q "^gateway ready at $url" "$log" && break
  kill -0 "$pid" 2>/dev/null || fail "the gateway exited before it was ready"
  sleep 0.5
done
grep -q "^gateway ready at $url" "$log" || fail "not ready after 60 s"

# A chat completion, answered by one of the fleet's pods.
headers=$(mktemp)
body=$(curl -sS -D "$headers" "$url/v1/chat/completions" -H 'content-type: application/json' \
  -d '{"model":"llama-3.1-8b","messages":[{"role":"user","content":"Hello"}],"max_tokens":8}')
grep -qE '^HTTP/1.1 200' "$headers" || fail "chat completion: $(head -1 "$headers")"
grep -qiE '^x-served-by: pod-(a|b)' "$headers" || fail "chat completion not served by a fleet pod"
echo "$body" | grep -q '"object":"chat.completion"' || fail "chat completion body: $body"
rm -f "$headers"

# The pool's base model and its adapter.
models=$(curl -sS "$url/v1/models")
for id in llama-3.1-8b sql-lora; do
  echo "$models" | grep -q "\"id\":\"$id\"" || fail "/v1/models lacks $id: $models"
done

# An unknown model: 404 in the OpenAI error format.
status=$(curl -sS -o /dev/null -w '%{http_code}' "$url/v1/chat/completions" -H 'content-type: application/json' \
  -d '{"model":"no-such-model","messages":[{"role":"user","content":"Hi"}]}')
[ "$status" = 404 ] || fail "unknown model answered $status"

kill -TERM "$pid"
code=0
wait "$pid" || code=$?
[ "$code" = 0 ] || fail "exit code $code after SIGTERM"
grep -q '^stopped$' "$log" || fail "no clean stop"
trap - EXIT
rm -f "$log"
echo "verify own-pods: ok"
