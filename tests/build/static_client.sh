#!/usr/bin/env bash
# `cq` loads no shared library at all (docs/adr/0032, 0052): where the build
# found the static archives, nothing may creep back into its NEEDED list (a
# dependency linked shared costs every command 0.3-1 ms on a slow machine),
# and no dynamic loader runs before its main.
# Usage: static_client.sh CQ_BINARY ON|OFF
set -euo pipefail
bin=$1 static=$2
if [[ $static != ON ]]; then
  echo "skip: this build links cq's libraries shared (static archives not installed)"
  exit 77
fi
command -v readelf >/dev/null || { echo "skip: no readelf"; exit 77; }
needed=$(readelf -d "$bin" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' | sort)
if [[ -n $needed ]]; then
  echo "FAIL: $bin needs shared libraries:"
  echo "$needed"
  exit 1
fi
if readelf -lW "$bin" | grep -q 'INTERP'; then
  echo "FAIL: $bin asks for a dynamic loader (a PT_INTERP header)"
  exit 1
fi
echo "ok: $bin is static: no shared library, no dynamic loader"
# Nor do NORM and Protolib come along (cli/static/no_norm.cpp): their static
# constructors would run before every command's main.
if command -v nm >/dev/null && nm "$bin" | grep -q -E 'ProtoAddress|NormInstance::'; then
  echo "FAIL: $bin links NORM or Protolib, whose static constructors run at every start"
  exit 1
fi
echo "ok: no NORM or Protolib in $bin"
# And it still works: ZeroMQ, sodium and fmt came along.
"$bin" --version
