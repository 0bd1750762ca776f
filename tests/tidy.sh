#!/usr/bin/env bash
# Fails when a nondeterministic call or a raw contact with the OS appears
# outside an adapter, anywhere in the tree (CONVENTIONS.md: one seam for
# everything nondeterministic; TigerBeetle's tidy.zig is the model).
#
#   tests/tidy.sh [ROOT]
#
# Adapters are where such calls belong. Exceptions are files that still make
# such calls for a reason written next to them; an exception that no longer
# makes any is stale and fails the check too, so the list only shrinks.
set -u
root=${1:-.}
cd "$root" || exit 2

# The calls: clocks, sleeps, randomness, raw ZeroMQ, processes and signals,
# /proc and cgroup files read directly.
banned='system_clock::now|steady_clock::now|high_resolution_clock::now|sleep_for|sleep_until|usleep\(|[^_a-z]rand\(|random_device|[^a-z_]zmq_(send|recv|socket|ctx_[a-z]+|bind|connect|poll|setsockopt|getsockopt|close|msg_[a-z]+)\(|zmq::|[^a-z_.]fork\(|[^a-z_]exec[lv]p?e?\(|[^a-z_.>]kill(pg)?\(|waitid\(|pidfd_[a-z_]+\(|ifstream.*"/(proc|sys)/'

# Folders and files whose job is to make these calls.
adapters=(
  bus/src/          # the wire: the gateway's socket thread, the CLI's client
  node/adapters/    # the node's process host, disk, host and GPU probes, link
  node/shim.cpp     # cq-shim: forks and execs the workload
  cli/src/sys.cpp   # the CLI's processes, clock and /proc
)

# Named exceptions: PATH|why. Keep it short.
exceptions=(
  "coordinator/main.cpp|the process's wall-clock epoch and its shutdown wait"
  "bench/|benchmarks time real programs on the real clock"
  "sim/main.cpp|cq-sim reports its wall time per simulated hour"
  "tests/tools/load.cpp|a load generator with real deadlines"
  "tests/unit/node_gpu_test.cpp|deadlines for real processes of the GPU probe"
)

failed=0
hits=$(grep -rnE "$banned" --include='*.cpp' --include='*.hpp' --include='*.h' \
  actors bus coordinator node cli sim bench tests 2>/dev/null |
  grep -vE '^[^:]+:[0-9]+:[[:space:]]*(//|\*|/\*)' || true) # comments name calls; they make none

allowed() { # path
  local p=$1 a e
  for a in "${adapters[@]}"; do [[ $p == "$a"* ]] && return 0; done
  for e in "${exceptions[@]}"; do [[ $p == "${e%%|*}"* ]] && return 0; done
  return 1
}

bad=""
while IFS= read -r line; do
  [[ -z $line ]] && continue
  path=${line%%:*}
  allowed "$path" || bad+="$line"$'\n'
done <<<"$hits"
if [[ -n $bad ]]; then
  echo "nondeterministic or OS calls outside the adapters (use a seam, see CONVENTIONS.md):"
  printf '%s' "$bad"
  failed=1
fi

for e in "${exceptions[@]}"; do
  p=${e%%|*}
  if ! grep -q "^$p" <<<"$(cut -d: -f1 <<<"$hits")"; then
    echo "stale exception in tests/tidy.sh: $p makes no such call any more; remove its entry"
    failed=1
  fi
done

if ((failed)); then
  echo "0 passed, 1 failed"
  exit 1
fi
echo "1 passed, 0 failed"
