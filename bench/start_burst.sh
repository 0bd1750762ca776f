#!/usr/bin/env bash
# Measures how fast one local node starts a burst of jobs placed together:
# one array of N tasks that need no CPU (`--cpus 0`), so the coordinator
# places them all at once, each a `sleep` that uses no CPU while the others
# start. It prints the time from the submit to the median and the last task
# launched (the node log's "started pid" lines), then cancels them. ADR 0068
# has figures. Usage: bench/start_burst.sh [N] [DIR] (default 100 tasks, state
# under /tmp); DIR on another file system (a journaled ext4 loop device,
# say) measures that one. CQ_BIN selects the binaries.
set -euo pipefail
n=${1:-100}
source "$(dirname "$0")/local_up.sh" starts "${2:-/tmp}"
t0=$(date +%s%3N)
id=$("$CQ_BIN/cq" submit -q --ram 32M --cpus 0 --array "1-$n" -- \
  sleep 600)
running() {
  "$CQ_BIN/cq" ls --state running --expand --json | python3 -c \
    'import json, sys; print(len(json.load(sys.stdin)["jobs"]))'
}
deadline=$((SECONDS + 120))
until [[ $(running) == "$n" ]]; do
  ((SECONDS < deadline)) || { echo "the $n tasks did not all start within 120 s" >&2; exit 1; }
  sleep 0.05
done
# When the node launched each task: its log's "started pid" lines.
log=$HOME/.local/share/cq/node.log
T0=$t0 N=$n python3 - "$log" <<'PY'
import datetime, os, sys
t0 = int(os.environ["T0"])
lag = []
for line in open(sys.argv[1]):
    if "): started pid" in line:
        stamp = datetime.datetime.strptime(line[:23], "%Y-%m-%dT%H:%M:%S.%f")
        ms = stamp.replace(tzinfo=datetime.timezone.utc).timestamp() * 1000
        lag.append(ms - t0)
lag.sort()
print("%s tasks placed together: median %d ms, last %d ms after the submit (%d launches)"
      % (os.environ["N"], lag[len(lag) // 2], lag[-1], len(lag)))
PY
# Ended before `cq down` (which leaves workloads running, as a node restart does).
"$CQ_BIN/cq" cancel "$id" >/dev/null
"$CQ_BIN/cq" wait "$id" >/dev/null 2>&1 || true
