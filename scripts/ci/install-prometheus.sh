#!/usr/bin/env bash
# Installs Debian's `prometheus` package (the server binary test/e2e/prometheus.test.ts
# starts on 127.0.0.1) when it is missing. Uses the package lists already on the
# machine first and runs `apt-get update` only if that install fails. The
# package's own systemd service is not started: the test runs its own server
# with a generated config in a temp dir.
set -euo pipefail

if command -v prometheus >/dev/null 2>&1; then
  prometheus --version 2>&1 | head -1
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
# policy-rc.d 101: do not start the packaged service during the install.
install_prometheus() {
  $SUDO apt-get install -y --no-install-recommends prometheus
}
POLICY=/usr/sbin/policy-rc.d
ADDED_POLICY=0
if [ ! -e "$POLICY" ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$POLICY" >/dev/null
  $SUDO chmod +x "$POLICY"
  ADDED_POLICY=1
fi
cleanup() { if [ "$ADDED_POLICY" = 1 ]; then $SUDO rm -f "$POLICY"; fi; }
trap cleanup EXIT

if ! install_prometheus; then
  $SUDO apt-get update
  install_prometheus
fi
prometheus --version 2>&1 | head -1
