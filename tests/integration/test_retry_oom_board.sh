#!/usr/bin/env bash
# Issue 9, acceptances 6 and 7. --retry-oom 2: a job over its cap is retried
# with 1.5x and 2.25x caps and then fails oom (the node's watchdog enforces
# the caps; no root needed). The board file stays valid JSON while a storm
# of submits and exits rewrites it: a reader loop never sees a partial file.
source "$(dirname "$0")/lib.sh"
start_cq
node_pid=$(cat "$state/node.pid")
kill "$node_pid"
wait_until 10 "cq-node stops" gone "$node_pid"
printf '\n[memory]\nmode = "watchdog"\n' >>"$state/node/node.toml"
# The coordinator again, with a board.
cq down >/dev/null 2>&1 || true
board=$work/board.json
cq-coordinator --state "$state/coordinator" --bind "$CQ_URL" --board "$board" \
  >>"$state/coordinator.log" 2>&1 &
echo $! >"$state/coordinator.pid"
start_cq
wait_until 10 "the node reports watchdog" bash -c \
  "[[ \$(cq node ls --json | jq -r '.nodes[0].mem_cap_mode') == watchdog ]]"

mib=$((1024 * 1024))
hog=$(cq submit --name hog --ram 64M --retry-oom 2 -- sh -c \
  "{ head -c 536870912 /dev/zero; sleep 30; } | tail -c 536870912 >/dev/null")
wait_until 90 "the hog ends" bash -c "[[ \$(cq show $hog --json | jq -r .job.state) =~ ^(failed|succeeded)$ ]]"
r=$(cq show "$hog" --json | jq -r '"\(.job.state) \(.job.reason) \(.job.oom_retries) \(.job.effective_ram_bytes)"')
[[ $r == "failed oom 2 $((144 * mib))" ]] || fail "the hog ended as: $r"
reasons=$(cq show "$hog" --json | jq -r '[.allocations[].reason] | join(",")')
[[ $reasons == oom,oom,oom ]] || fail "allocation reasons: $reasons"
# Each retry is one requeued event (no failed before the end), in MiB.
caps=$(cq events "$hog" --json | jq -r 'select(.kind == "requeued") | .detail' | grep -o 'with [0-9.]* MiB' | tr '\n' ' ')
[[ $caps == "with 96.0 MiB with 144.0 MiB " ]] || fail "the ladder was: $caps"
[[ $(cq events "$hog" --json | jq -r 'select(.kind == "failed") | .kind' | wc -l) == 1 ]] ||
  fail "failed events: $(cq events "$hog")"
cq show "$hog" | grep -q "RAM cap  144.0 MiB (--ram 64.0 MiB, raised by 2 OOM retries of --retry-oom)" ||
  fail "cq show's RAM cap: $(cq show "$hog" | grep 'RAM cap')"
pass "--retry-oom 2: caps 64 MiB, 96 MiB (x1.5), 144 MiB (x2.25), then failed oom"
peak=$(cq profile ls --json | jq -r --arg k "$(job_field "$hog" profile)" '.profiles[] | select(.key == $k) | .peak_ram_bytes')
((peak >= 144 * mib)) || fail "the profile's peak $peak is below the last cap"
pass "the profile records a peak of at least the cap it hit ($((peak / mib)) MiB)"

# The board under a storm: a reader parses it in a loop.
wait_until 10 "the board exists" test -s "$board"
jq -e '.nodes[0].name and (.queue | type == "array")' "$board" >/dev/null || fail "board: $(head -c 300 "$board")"
reader() {
  local n=0
  while [[ ! -f $work/stop ]]; do
    jq -e . "$board" >/dev/null 2>&1 || { echo "partial board seen" >"$work/bad"; return; }
    n=$((n + 1))
  done
  echo "$n" >"$work/reads"
}
reader &
ids=()
for i in $(seq 1 60); do ids+=("$(cq submit --name "s$i" --ram 16M -- true)"); done
cq wait "${ids[@]}" >/dev/null || fail "the storm's jobs did not all succeed"
touch "$work/stop"
wait_until 10 "the reader stops" test -f "$work/reads" -o -f "$work/bad"
[[ ! -f $work/bad ]] || fail "a reader saw a partial board file"
wait_until 5 "the board shows an empty queue" bash -c "jq -e '.queue | length == 0' $board >/dev/null"
pass "the board stayed valid JSON through 60 submits and exits ($(cat "$work/reads") reads)"
