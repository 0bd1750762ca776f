#!/usr/bin/env bash
# Measures a drain of N `true` tasks (one array) on a private local node, and
# where its CPU goes: jobs/s, then milliseconds of CPU per job in the
# coordinator, in the node daemon, and on the whole machine (busy and idle).
# What "the whole machine" adds to the two daemons is mostly the cq-shims,
# the jobs themselves and the kernel's work for them.
# Usage: bench/drain.sh [N] [DIR] (default 1000 tasks, state under /tmp);
# DIR on another file system (tmpfs: /dev/shm) measures that one. Runs one
# after another on the same ext4 slow down: each removes its state dir, and
# ext4 without a journal skips recently deleted inodes one by one at every
# creation (docs/operations.md, "What a trivial job costs the node").
# CQ_BIN selects the binaries; CPUS=N submits the tasks with --cpus N (the
# default reserves one CPU a task: two at a time on a 2-CPU node).
set -euo pipefail
n=${1:-1000}
source "$(dirname "$0")/local_up.sh" drain "${2:-/tmp}"
pid_of() { # the daemon whose command line names this private home
  pgrep -f "$1.*$work" | head -1 || true
}
coord=$(pid_of cq-coordinator)
node=$(pid_of cq-node)
if [[ -z $coord || -z $node ]]; then
  echo "cannot find the daemons of $work" >&2
  exit 1
fi
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; } # user + system, in clock ticks
machine() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8, $5 + $6}' /proc/stat; }
hz=$(getconf CLK_TCK)
c0=$(ticks "$coord") n0=$(ticks "$node")
read -r b0 i0 < <(machine)
t0=$(date +%s%N)
id=$("$CQ_BIN/cq" submit -q --ram 64M ${CPUS:+--cpus $CPUS} --array "1-$n" -- true)
"$CQ_BIN/cq" wait "$id" >/dev/null
t1=$(date +%s%N)
c1=$(ticks "$coord") n1=$(ticks "$node")
read -r b1 i1 < <(machine)
python3 - "$n" "$t0" "$t1" "$hz" "$c0" "$c1" "$n0" "$n1" "$b0" "$b1" "$i0" "$i1" <<'EOF'
import sys
n, t0, t1, hz = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
c0, c1, n0, n1, b0, b1, i0, i1 = map(float, sys.argv[5:])
ms = lambda ticks: ticks * 1000 / hz / n
print(f"{n} tasks in {(t1 - t0) / 1e9:.2f} s: {n * 1e9 / (t1 - t0):.0f} jobs/s; CPU per job: "
      f"coordinator {ms(c1 - c0):.2f} ms, node {ms(n1 - n0):.2f} ms, "
      f"machine busy {ms(b1 - b0):.2f} ms, idle {ms(i1 - i0):.2f} ms")
EOF
