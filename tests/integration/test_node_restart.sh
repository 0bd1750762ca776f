#!/usr/bin/env bash
# Issue 4, acceptance 6: kill -9 of cq-node while jobs run does not kill them;
# the restarted node (cq up) re-adopts them from its state dir (pid plus start
# time), keeps enforcing their memory caps, and still records their exits and
# peak memory (read from cq-shim's status file: the restarted node is not the
# workload's parent).
source "$(dirname "$0")/lib.sh"
start_cq
mark=$((700000 + RANDOM))
job=$(cq submit -- sh -c "sleep 0.$mark; sleep 4; echo finished")
capped=$(cq submit --ram 128M -- sh -c "sleep 4; { head -c 536870912 /dev/zero; sleep 30; } | tail -c 536870912 >/dev/null")
wait_until 30 "job $job runs" job_state_is "$job" running
wait_until 30 "job $capped runs" job_state_is "$capped" running
node_pid=$(cat "$state/node.pid")
kill -9 "$node_pid"
wait_until 10 "cq-node is gone" gone "$node_pid"
pgrep -f "^sleep 0.$mark\$|^sleep 4\$" >/dev/null || fail "the job died with cq-node"
# The durable record is written once, before the launch; it names the leader
# only when that is known before the launch (a standby cq-shim, ADR 0058).
# The leader's pid and start time go beside it, unsynced. Without either (as
# after a power loss, which would have ended the workload anyway) the
# restarted node finds the leader by its marker.
allocs=$state/node/allocations
job_alloc=$(cq show "$job" --json | jq -r '.allocations[0].id')
capped_alloc=$(cq show "$capped" --json | jq -r '.allocations[0].id')
read -r leader_pid leader_ticks <"$allocs/$job_alloc/leader" || fail "no leader file"
[[ $(ps -o pgid= -p "$leader_pid" | tr -d ' ') == "$leader_pid" && $leader_ticks -gt 0 ]] ||
  fail "the leader file names pid $leader_pid, not a running group leader"
rec_pid=$(jq -r '.pid // 0' "$allocs/$job_alloc/alloc.json")
[[ $rec_pid == 0 || $rec_pid == "$leader_pid" ]] ||
  fail "alloc.json names pid $rec_pid, but the leader is $leader_pid"
rm "$allocs/$capped_alloc/leader"
start_cq
[[ $(cat "$state/node.pid") != "$node_pid" ]] || fail "cq up did not restart cq-node"
readopted() { (($(grep -c "re-adopted running pid" "$state/node.log") == 2)); }
wait_until 10 "the node log reports both re-adoptions" readopted
pass "the jobs kept running through kill -9 of cq-node and were re-adopted"
wait_until 60 "job $job succeeds" job_state_is "$job" succeeded
[[ $(job_field "$job" exit_code) == 0 ]] || fail "exit code $(job_field "$job" exit_code), not 0"
[[ $(cq logs "$job") == finished ]] || fail "its log is '$(cq logs "$job")'"
peak=$(cq show "$job" --json | jq -r '.allocations[0].peak_ram_bytes // 0')
((peak > 0)) || fail "no peak memory recorded for the re-adopted job"
pass "the re-adopted job's exit (succeeded, code 0) and peak ($peak bytes) are recorded"
wait_until 60 "job $capped ends" bash -c "[[ \$(cq show $capped --json | jq -r .job.state) == failed ]]"
[[ $(cq show "$capped" --json | jq -r '.allocations[0].reason') == oom ]] ||
  fail "the re-adopted capped job ended '$(cq show "$capped" --json | jq -r '.allocations[0].reason')', not oom"
pass "the re-adopted job's memory cap is still enforced (oom)"
