#!/usr/bin/env bash
# Builds cq's Debian package into DIR (default ./dist): cq_VERSION-1_ARCH.deb
# (the programs, stripped, the systemd units, the launchd plist and the docs)
# and cq-dbgsym_VERSION-1_ARCH.ddeb (their debug symbols). Installs what the
# build needs first, and builds, unless --no-build (the build is current).
#   deploy/package.sh [--no-build] [DIR]
# Then, on each machine: apt install ./cq_VERSION-1_ARCH.deb (docs/install.md).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${CQ_BUILD_DIR:-$root/build}
no_build=0
if [[ ${1:-} == --no-build ]]; then
  no_build=1
  shift
fi
out=${1:-$root/dist}
if ((!no_build)); then
  "$root/deploy/install-deps.sh"
  "$root/deploy/build.sh"
fi
[[ -f $build/CPackConfig.cmake ]] || { echo "package.sh: no build in $build (run deploy/build.sh)" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
staging=$(mktemp -d "$out/.cpack-XXXXXX")
trap 'rm -rf "$staging"' EXIT
(cd "$build" && cpack -G DEB -B "$staging" >"$staging/cpack.log" 2>&1) || {
  cat "$staging/cpack.log" >&2
  exit 1
}
shopt -s nullglob
made=("$staging"/*.deb "$staging"/*.ddeb)
((${#made[@]})) || { cat "$staging/cpack.log" >&2; echo "package.sh: cpack made no package" >&2; exit 1; }
for f in "${made[@]}"; do
  mv -f "$f" "$out/"
  printf '%s  %s\n' "$(du -h "$out/${f##*/}" | cut -f1)" "$out/${f##*/}"
done
