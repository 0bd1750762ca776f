#!/usr/bin/env bash
# Measures how fast one local node records a burst of exits: N jobs (no CPU
# request, so all run at once) each wait for a file; the file appears, they
# all end together, and the script prints the time from that moment to the
# median and the last job finished on the coordinator. ADR 0053 has figures.
# Usage: bench/exit_burst.sh [N] [DIR] (default 100 jobs, state under /tmp);
# DIR on another file system (a journaled ext4 loop device, say) measures
# that one. CQ_BIN selects the binaries.
set -euo pipefail
n=${1:-100}
source "$(dirname "$0")/local_up.sh" burst "${2:-/tmp}"
go=$work/go
"$CQ_BIN/cq" submit -q --ram 32M --cpus 0 --array "1-$n" -- \
  sh -c "while [ ! -e $go ]; do sleep 0.02; done" >/dev/null
running() {
  "$CQ_BIN/cq" ls --state running --expand --json | python3 -c \
    'import json, sys; print(len(json.load(sys.stdin)["jobs"]))'
}
deadline=$((SECONDS + 120))
until [[ $(running) == "$n" ]]; do
  ((SECONDS < deadline)) || { echo "the $n jobs did not all start within 120 s" >&2; exit 1; }
  sleep 0.05
done
sleep 0.5 # the node settles
t0=$(date +%s%3N)
touch "$go"
deadline=$((SECONDS + 120))
while [[ $("$CQ_BIN/cq" ls --state live --limit 1 | wc -l) -gt 1 ]]; do
  ((SECONDS < deadline)) || { echo "the jobs did not all end within 120 s" >&2; exit 1; }
  sleep 0.01
done
"$CQ_BIN/cq" ls --all --expand --json | T0=$t0 N=$n python3 -c '
import json, os, sys
t0 = int(os.environ["T0"])
lag = sorted(j["finished_ms"] - t0 for j in json.load(sys.stdin)["jobs"])
print("%s jobs ending together: median %d ms, last %d ms after their release"
      % (os.environ["N"], lag[len(lag) // 2], lag[-1]))'
