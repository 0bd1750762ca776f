#!/usr/bin/env bash
# The quick start: installs what is missing, builds, starts a coordinator and a
# node for this machine on loopback (state under ~/.local/share/cq, token in
# ~/.config/cq), submits a sample job and shows it finishing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/deploy/install-deps.sh"
"$root/deploy/build.sh"
cq="${CQ_BUILD_DIR:-$root/build}/bin/cq"
"$cq" up ${CQ_PORT:+--port "$CQ_PORT"}
job=$("$cq" submit --name hello -- sh -c 'echo "hello from cq on $(hostname)"; sleep 1; echo done')
echo "submitted job $job"
"$cq" wait "$job" --timeout 120
"$cq" logs "$job"
"$cq" ls --all
echo
echo "cq is running. Add $(dirname "$cq") to PATH to use 'cq'; 'cq down' stops it."
