#!/usr/bin/env bash
# Fixture of the package tests: deploy/package.sh --no-build into $1 (the
# build is current: ctest runs after it).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$1
rm -rf "$out"
command -v dpkg-shlibdeps >/dev/null || { echo "skip: no dpkg-shlibdeps (dpkg-dev)"; exit 77; }
"$here/../../deploy/package.sh" --no-build "$out"
