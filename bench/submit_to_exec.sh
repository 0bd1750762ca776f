#!/usr/bin/env bash
# Measures submit-to-exec latency on an idle local node: the time from just
# before `cq submit` starts to the moment the job's first command runs, with a
# private `cq up` on loopback. Also prints the idle daemons' RSS.
# Usage: bench/submit_to_exec.sh [RUNS] (default 30); CQ_BIN selects the binaries.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
CQ_BIN=${CQ_BIN:-$here/../build/bin}
runs=${1:-30}
work=$(mktemp -d /tmp/cq-bench-XXXXXX)
export HOME=$work/home CQ_CONFIG_DIR=$work/home/.config/cq
mkdir -p "$HOME"
port=$((10000 + RANDOM % 22000)) # below the ephemeral range
trap '"$CQ_BIN/cq" down >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
"$CQ_BIN/cq" up --port "$port" >/dev/null
sleep 2 # let the daemons settle before reading their idle RSS
state=$HOME/.local/share/cq
for d in coordinator node; do
  echo "idle RSS of cq-$d: $(awk '/VmRSS/ {print $2, $3}' "/proc/$(cat "$state/$d.pid")/status")"
done
lat=()
# As cq-bench measures it: the clock read by the shell itself just before
# `cq submit` (no process of its own, and no subshell forked for the id),
# the job's one command printing the clock as it runs, and the job's end
# awaited only after 50 ms (a `read` timing out on an idle pipe, not a
# process starting beside the start it measures).
mkfifo "$work/idle"
exec 9<>"$work/idle"
for ((i = 0; i < runs; i++)); do
  out=$work/t$i
  t0=${EPOCHREALTIME/./}000
  "$CQ_BIN/cq" submit -q -- /bin/date +%s%N >"$work/id"
  read -r -t 0.05 -u 9 || true
  "$CQ_BIN/cq" wait "$(<"$work/id")" >/dev/null
  "$CQ_BIN/cq" logs "$(<"$work/id")" >"$out"
  lat+=($((($(<"$out") - t0) / 1000)))
done
printf '%s\n' "${lat[@]}" | sort -n | awk -v runs="$runs" '
  { v[NR] = $1 }
  END {
    p50 = v[int((NR + 1) * 0.5)]; p99 = v[int(NR * 0.99 + 0.999)]
    printf "submit-to-exec latency, idle local node: p50 %.1f ms, p99 %.1f ms, min %.1f ms, max %.1f ms (%d runs)\n", p50/1000, p99/1000, v[1]/1000, v[NR]/1000, runs
    printf "{\"figure\": \"submit-to-exec latency on an idle local node\", \"p50_ms\": %.2f, \"p99_ms\": %.2f, \"min_ms\": %.2f, \"max_ms\": %.2f, \"runs\": %d, \"target_p50_ms\": 10}\n", p50/1000, p99/1000, v[1]/1000, v[NR]/1000, runs
  }'
