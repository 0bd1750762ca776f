#!/usr/bin/env bash
# Joins this machine to a cq coordinator as a service, with the cq package
# installed: the same as `cq-node install [ENDPOINT] CODE NAME`.
#   deploy/install-node.sh CODE NAME     (CODE from `cq node invite NAME`)
set -euo pipefail
if ! command -v cq-node >/dev/null; then
  echo "install-node.sh: cq-node is not installed: apt install ./cq_VERSION-1_ARCH.deb first" \
    "(deploy/package.sh builds it; docs/install.md)" >&2
  exit 2
fi
if [[ $(id -u) != 0 ]]; then
  exec sudo cq-node install "$@"
fi
exec cq-node install "$@"
