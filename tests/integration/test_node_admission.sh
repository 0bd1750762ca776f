#!/usr/bin/env bash
# Issue 4, acceptance 2 and 7: pre-launch RAM admission refuses with rc 125
# (launch_failed) without starting the workload when MemAvailable dropped
# since the scheduler's view; a finished job's measured peak and wall time
# size the next submission of the same command.
source "$(dirname "$0")/lib.sh"
mkdir -p "$state" "$CQ_CONFIG_DIR"
cq-coordinator --state "$state/coordinator" --init-owner tester >"$CQ_CONFIG_DIR/token" 2>/dev/null
chmod 600 "$CQ_CONFIG_DIR/token"
# A long heartbeat interval freezes the coordinator's view of MemAvailable at
# the node's first heartbeat, so the test can make the node's own re-sample
# at launch disagree with it; a node timeout longer than the test keeps the
# node online meanwhile (the outside process may take long to fill its memory
# on a loaded machine).
cq-coordinator --state "$state/coordinator" --bind "$CQ_URL" --heartbeat-fresh-ms 600000 --node-timeout 3600s \
  >"$state/coordinator.log" 2>&1 &
echo $! >"$state/coordinator.pid"
wait_until 10 "the coordinator answers" cq node ls
code=$(cq node invite box)
cq-node --join "$CQ_URL" "$code" box --state "$state/node" --heartbeat-ms 600000 \
  >"$state/node.log" 2>&1 &
echo $! >"$state/node.pid"
wait_until 10 "the node joins" bash -c "cq node ls --json | jq -e '.nodes[0].name == \"box\"'"
cq node approve box >/dev/null
wait_until 10 "the node's first heartbeat arrives" bash -c "cq node ls --json | jq -e '.nodes[0].mem_available_bytes > 0'"
seen=$(cq node ls --json | jq '.nodes[0].mem_available_bytes')
gib=$((1 << 30))
((seen > 7 * gib)) || fail "the node reports only $seen bytes available"

# Hold 5 GiB outside cq, so MemAvailable is now well below what the
# coordinator saw. The hog touches every page itself and says when it holds
# them (pushing gigabytes through a pipe took minutes on slow machines).
setsid "$CQ_BIN/cq-test-hog" $((5 * gib)) "$work/hog.ready" 2>"$work/hog.err" &
hog=$! # its own session and process group: killed as a group below
trap 'kill -- -$hog 2>/dev/null || true; cleanup' EXIT
wait_until 60 "the outside process holds its memory" \
  bash -c "test -s '$work/hog.ready' || ! kill -0 $hog"
[[ -s $work/hog.ready ]] || fail "the outside process died: $(cat "$work/hog.err")"
now_avail=$(($(awk '/MemAvailable/ {print $2}' /proc/meminfo) * 1024))
((seen - now_avail > 2 * gib)) ||
  fail "MemAvailable fell only from $seen to $now_avail bytes while 5 GiB were held"
# A start minimum between what the coordinator saw and what the node sees now:
# the coordinator places the job, the node's own sample at launch refuses it.
start_min=$((now_avail + (seen - now_avail) / 2))
marker=$work/workload-ran
job=$(cq submit --ram 64M --ram-start-min "$start_min" -- sh -c "touch $marker")
wait_until 30 "the job fails" job_state_is "$job" failed
[[ $(job_field "$job" reason) == launch_failed ]] || fail "reason is $(job_field "$job" reason)"
[[ $(job_field "$job" exit_code) == 125 ]] || fail "exit code is $(job_field "$job" exit_code), not 125"
[[ ! -e $marker ]] || fail "the workload ran although admission refused it"
cq logs "$job" | grep -qi "memavailable\|available" || fail "the log does not say why: $(cq logs "$job")"
pass "start minimum not met at launch: rc 125 launch_failed, and the workload never ran"
kill -- -"$hog" 2>/dev/null || true

cmd=(sh -c "{ head -c 300000000 /dev/zero; sleep 1; } | tail -c 300000000 >/dev/null")
first=$(cq submit --ram 1G -- "${cmd[@]}")
wait_until 60 "the measured job succeeds" job_state_is "$first" succeeded
key=$(job_field "$first" profile)
prof=$(cq profile ls --json | jq --arg k "$key" '.profiles[] | select(.key == $k)')
[[ -n $prof ]] || fail "no profile for '$key'"
peak=$(jq '.peak_ram_bytes' <<<"$prof")
est=$(jq '.est_ms' <<<"$prof")
ram=$(jq '.ram_bytes' <<<"$prof")
((peak >= 250000000 && peak < 1 * gib)) || fail "measured peak $peak is not about 300 MB"
((est >= 1000)) || fail "wall-time estimate $est ms is below the job's 1 s"
pass "the finished job's profile shows its peak ($peak bytes) and wall time (est $est ms)"
second=$(cq submit -- "${cmd[@]}")
[[ $(job_field "$second" effective_ram_bytes) == "$ram" ]] ||
  fail "the next submission is sized $(job_field "$second" effective_ram_bytes), not $ram"
[[ $(job_field "$second" effective_est_ms) == "$est" ]] || fail "the next estimate is not $est"
pass "the next submission without --ram is sized from the profile ($ram bytes)"
wait_until 60 "the second run succeeds" job_state_is "$second" succeeded
pass "the second run, sized from the profile, succeeded"
