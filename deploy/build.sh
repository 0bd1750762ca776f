#!/usr/bin/env bash
# Configures and builds cq into ./build (or $CQ_BUILD_DIR). Extra arguments go to CMake,
# e.g. deploy/build.sh -DCQ_SANITIZE=address,undefined
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${CQ_BUILD_DIR:-$root/build}
jobs=${CQ_JOBS:-2}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build "$build" -j "$jobs"
