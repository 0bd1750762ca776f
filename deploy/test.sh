#!/usr/bin/env bash
# The tests: installs what is missing, builds, runs every test with ctest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/deploy/install-deps.sh"
"$root/deploy/build.sh" "$@"
cd "${CQ_BUILD_DIR:-$root/build}"
ctest --output-on-failure --timeout 300 -j "${CQ_TEST_JOBS:-2}"
