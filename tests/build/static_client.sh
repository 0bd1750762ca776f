#!/usr/bin/env bash
# `cq` loads only the C library (docs/adr/0032): where the build found the
# static archives, nothing else may creep back into its NEEDED list (a new
# dependency linked shared costs every command 0.3-1 ms on a slow machine).
# Usage: static_client.sh CQ_BINARY ON|OFF
set -euo pipefail
bin=$1 static=$2
if [[ $static != ON ]]; then
  echo "skip: this build links cq's libraries shared (static archives not installed)"
  exit 77
fi
command -v readelf >/dev/null || { echo "skip: no readelf"; exit 77; }
needed=$(readelf -d "$bin" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' | sort)
extra=$(grep -v -E '^(libc\.so\.6|ld-linux.*\.so\.2)$' <<<"$needed" || true)
if [[ -n $extra ]]; then
  echo "FAIL: $bin needs shared libraries beyond the C library:"
  echo "$extra"
  exit 1
fi
echo "ok: $bin needs only: $(echo $needed)"
# Nor do NORM and Protolib come along (cli/static/no_norm.cpp): their static
# constructors would run before every command's main.
if command -v nm >/dev/null && nm "$bin" | grep -q -E 'ProtoAddress|NormInstance::'; then
  echo "FAIL: $bin links NORM or Protolib, whose static constructors run at every start"
  exit 1
fi
echo "ok: no NORM or Protolib in $bin"
# And it still works: ZeroMQ, sodium and fmt came along.
"$bin" --version
