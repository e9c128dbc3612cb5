#!/bin/bash
# Builds llama.cpp's real `llama-server` from source, for the real-engine tests
# and the live bench on real pods. The source is the llama.cpp tree vendored in
# the llama-cpp-python sdist on PyPI (the only registry that carries it here);
# gguf-py from the same tree, in a venv of its own, writes the tiny test model
# (testing/llamacpp/make-model.py).
#
# Everything lands under LLAMACPP_PREFIX (default ~/.cache/llama-cpp, where
# testing/llamacpp/paths.ts looks). Cold build on 2 cores: about 7 minutes.
# Each part already there is skipped, so CI calls it on every run.
set -euo pipefail
VERSION=0.3.36
P=${LLAMACPP_PREFIX:-$HOME/.cache/llama-cpp}
mkdir -p "$P/src" "$P/bin"

if [ -x "$P/bin/llama-server" ] && [ -d "$P/gguf-py/gguf" ]; then
  echo "llama-server already built: $P/bin/llama-server"
else
  echo "building llama-server from llama-cpp-python $VERSION's vendored llama.cpp into $P (about 7 minutes cold)"
  cd "$P/src"
  if [ ! -f "llama_cpp_python-$VERSION.tar.gz" ]; then
    python3 -m pip download --quiet --no-binary :all: --no-deps "llama-cpp-python==$VERSION" -d "$P/src"
  fi
  rm -rf "llama_cpp_python-$VERSION"
  tar xzf "llama_cpp_python-$VERSION.tar.gz"
  L=$P/src/llama_cpp_python-$VERSION/vendor/llama.cpp
  # Portable code (no -march=native): the cache may move between machines.
  cmake -S "$L" -B "$P/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF > "$P/cmake.log"
  ninja -C "$P/build" llama-server | awk 'NR % 25 == 0 { print "  ... " $0; fflush() }'
  cp "$P/build/bin/llama-server" "$P/bin/llama-server.part" && mv "$P/bin/llama-server.part" "$P/bin/llama-server"
  rm -rf "$P/gguf-py" && cp -r "$L/gguf-py" "$P/gguf-py"
  rm -rf "$P/build"
fi

if [ -x "$P/venv/bin/python" ] && "$P/venv/bin/python" -c 'import numpy, yaml' 2>/dev/null; then
  echo "model writer's venv ready: $P/venv"
else
  echo "making the model writer's venv (gguf-py needs numpy and pyyaml)"
  rm -rf "$P/venv" && python3 -m venv "$P/venv"
  "$P/venv/bin/python" -m pip install --quiet numpy pyyaml
fi
"$P/bin/llama-server" --version 2>&1 | tail -2
