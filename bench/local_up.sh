# Sourced by the bench scripts: `source bench/local_up.sh NAME ROOT` starts a
# private `cq up` (a coordinator and a node on loopback, state in a fresh
# folder under ROOT) and ends it, removing the folder, when the script exits.
# Sets CQ_BIN (the binaries: $CQ_BIN, else build/bin beside this folder),
# work (the folder) and HOME / CQ_CONFIG_DIR (inside it).
set -euo pipefail
CQ_BIN=${CQ_BIN:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../build/bin}
work=$(mktemp -d "$2/cq-bench-$1-XXXXXX")
export HOME=$work/home CQ_CONFIG_DIR=$work/home/.config/cq
mkdir -p "$HOME"
port=$((10000 + RANDOM % 22000)) # below the ephemeral range
trap '"$CQ_BIN/cq" down >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
"$CQ_BIN/cq" up --port "$port" >/dev/null
