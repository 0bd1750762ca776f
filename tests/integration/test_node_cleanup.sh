#!/usr/bin/env bash
# Issue 4, acceptance 5 (and the checkpoint environment): cleanup after every
# allocation stops the process group and every process carrying the
# allocation's marker (CQ_ALLOCATION_ID in its environment), and nothing else;
# a process that cannot be confirmed gone puts the node into a hold that only
# `cq release --hold` with its exact id removes.
#
# "Cannot be confirmed gone", realistically: a marked process frozen by the
# cgroup v1 freezer. SIGKILL stays pending on a frozen task (it sits in D state
# until thawed), so every cleanup scan still finds it; at the bound
# ([cleanup] max_wait_ms, shortened here to 1.5 s) the node must give up and
# hold itself, as it would for a process stuck in uninterruptible I/O.
source "$(dirname "$0")/lib.sh"
start_cq
node_dir=$state/node
mark=$((800000 + RANDOM))

# An unmarked process started outside cq, before the job.
sleep $((mark + 1)) &
outside=$!

job=$(cq submit -- sh -c "setsid sh -c 'sleep $mark' & sleep 0.3; sleep $((mark + 2)) </dev/null >/dev/null 2>&1 & exit 0")
wait_until 30 "job $job succeeds" job_state_is "$job" succeeded
# The exit is reported only after cleanup ended: nothing marked may remain now.
! pgrep -f "^sleep $mark\$" >/dev/null || fail "the detached (setsid) child carrying the marker survived"
! pgrep -f "^sleep $((mark + 2))\$" >/dev/null || fail "a background child of the job's group survived"
kill -0 "$outside" || fail "the unmarked process started outside cq was killed"
pass "cleanup killed the double-forked marked child and the group; an unmarked process is untouched"

# Checkpoint plumbing: CQ_RESUME, CQ_YIELD_FILE (its control dir exists), CQ_STATE_DIR.
env_job=$(cq submit -- sh -c 'echo "$CQ_RESUME|$CQ_YIELD_FILE|$CQ_STATE_DIR"; [ -d "$(dirname "$CQ_YIELD_FILE")" ] && [ ! -e "$CQ_YIELD_FILE" ] && [ -d "$CQ_STATE_DIR" ]')
wait_until 30 "job $env_job succeeds" job_state_is "$env_job" succeeded
alloc=$(cq show "$env_job" --json | jq -r '.allocations[0].id')
expect="0|$node_dir/allocations/$alloc/control/yield|$node_dir/jobs/$env_job/state"
[[ $(cq logs "$env_job") == "$expect" ]] || fail "job environment: '$(cq logs "$env_job")', expected '$expect'"
pass "CQ_RESUME=0, CQ_YIELD_FILE and CQ_STATE_DIR are set and their directories exist"

# Issue 7 item 18: exit 6 is a checkpoint only when the coordinator asked the
# job to yield. A job that creates its own yield file and exits 6 (nothing
# asked it) fails with exit code 6 and is not requeued: it cannot requeue
# itself forever.
ck=$(cq submit --preempt checkpoint -- sh -c 'if [ "$CQ_RESUME" = 1 ]; then echo resumed; exit 0; fi; : >"$CQ_YIELD_FILE"; exit 6')
wait_until 30 "job $ck fails" job_state_is "$ck" failed
[[ $(job_field "$ck" reason) == exit_code && $(job_field "$ck" exit_code) == 6 ]] ||
  fail "job $ck ended $(job_field "$ck" reason) / $(job_field "$ck" exit_code), not exit_code 6"
[[ $(cq show "$ck" --json | jq '.allocations | length') == 1 ]] ||
  fail "job $ck was requeued: $(cq show "$ck" --json | jq -c '[.allocations[] | {reason, exit_code}]')"
pass "exit 6 without a yield request is an ordinary failure, whoever created the yield file"

freezer=/sys/fs/cgroup/freezer
if [[ $(id -u) != 0 || ! -f $freezer/cgroup.procs ]]; then
  echo "skip: hold part (needs root and the cgroup v1 freezer)"
  kill "$outside"
  exit 77 # ctest reports a skip: part of this test could not run here
fi
fz=$freezer/cq-test-$$
mkdir "$fz"
thaw() {
  echo THAWED >"$fz/freezer.state" 2>/dev/null || true
  pkill -f "^sleep $((mark + 3))\$" 2>/dev/null || true
  rmdir "$fz" 2>/dev/null || true
  kill "$outside" 2>/dev/null || true
  cleanup
}
trap thaw EXIT

node_pid=$(cat "$state/node.pid")
kill "$node_pid"
wait_until 10 "cq-node stops" gone "$node_pid"
printf '\n[cleanup]\nmax_wait_ms = 1500\n' >>"$node_dir/node.toml"
start_cq

stuck=$(cq submit --ram 256M -- sh -c "sleep $((mark + 3)) & echo \$! > $fz/cgroup.procs; echo FROZEN > $fz/freezer.state; exit 0")
wait_until 30 "job $stuck starts" bash -c "[[ \$(cq show $stuck --json | jq -r .job.state) != queued ]]"
wait_until 30 "the node reports a hold" bash -c "[[ \$(cq node ls --json | jq '.nodes[0].holds | length') == 1 ]]"
hold=$(cq node ls --json | jq -r '.nodes[0].holds[0]')
hid=$(jq -r .id <<<"$hold")
[[ $(jq -r .lane <<<"$hold") == "" ]] || fail "a job without GPUs held lane '$(jq -r .lane <<<"$hold")', not the node"
[[ $(jq -r .allocation <<<"$hold") == $(cq show "$stuck" --json | jq -r '.allocations[0].id') ]] ||
  fail "the hold names another allocation"
wait_until 30 "job $stuck is recorded" job_state_is "$stuck" succeeded
jq -e --arg id "$hid" '.holds | map(.id) == [$id]' "$node_dir/holds.json" >/dev/null ||
  fail "holds.json does not hold $hid"
pass "a marked process that cannot be confirmed gone made hold $hid on the node"

set +e
out=$(cq release --hold 0123456789abcdef0123456789abcdef 2>&1)
rc=$?
set -e
[[ $rc -ne 0 ]] || fail "release with a wrong id succeeded: $out"
[[ $(cq node ls --json | jq '.nodes[0].holds | length') == 1 ]] || fail "a wrong id removed the hold"
pass "cq release --hold with a wrong id is refused (exit $rc)"
cq release --hold "$hid" >/dev/null || fail "cq release --hold $hid failed"
wait_until 10 "the node reports no hold" bash -c "[[ \$(cq node ls --json | jq '.nodes[0].holds | length') == 0 ]]"
jq -e '.holds == []' "$node_dir/holds.json" >/dev/null || fail "holds.json still holds something"
pass "cq release --hold with the right id removed it; the node reports no hold"

# Issue 7 item 14: the allocation's memory cgroup goes with the hold. It still
# holds the frozen process (SIGKILL waits until it thaws), so its removal is
# retried until the process is gone. The posix platform makes no cgroup: the
# frozen process dies of its pending SIGKILL once thawed.
salloc=$(cq show "$stuck" --json | jq -r '.allocations[0].id')
group=$(jq -r .cgroup "$node_dir/allocations/$salloc/alloc.json")
if [[ $(node_platform) == posix ]]; then
  [[ $group == "" ]] || fail "the posix platform made a memory cgroup ('$group')"
  echo THAWED >"$fz/freezer.state"
  wait_until 15 "the thawed process dies" bash -c "! pgrep -f '^sleep $((mark + 3))\$'"
  pass "posix: no memory cgroup; the thawed process died of its pending SIGKILL"
  exit 0
fi
[[ $group == /sys/fs/cgroup/* ]] || fail "the allocation had no memory cgroup ('$group')"
echo THAWED >"$fz/freezer.state"
wait_until 15 "the released hold's cgroup $group is removed" bash -c "[[ ! -d '$group' ]]"
pass "the released hold's memory cgroup was emptied and removed"
