#!/usr/bin/env bash
# Issue 7 item 2: a stop is state, not a message (SPEC section 10). The
# coordinator re-sends it until the node takes it, the node keeps it (with its
# kill deadline) across its own restarts, and a start is never sent for an
# allocation whose job was cancelled.
source "$(dirname "$0")/lib.sh"
start_cq
node_dir=$state/node
# A job that ignores TERM and would finish (touching its marker) after 60 s.
stubborn() { echo "trap '' TERM; sleep 60; touch $work/$1.finished"; }

# (a) Cancelled while its node daemon is down.
a=$(cq submit -- sh -c "$(stubborn a)")
wait_until 30 "job $a runs" job_state_is "$a" running
kill_node
[[ $(cq cancel "$a") == "$a stopping" ]] || fail "cancel did not answer stopping"
start_cq
wait_until 30 "job $a is cancelled" job_state_is "$a" cancelled
[[ ! -e $work/a.finished ]] || fail "the cancelled job ran to its end"
! pgrep -f "sleep 60; touch $work/a.finished" >/dev/null || fail "the cancelled job still runs"
pass "a cancel made while the node daemon was down is carried out when it returns (TERM ignored: killed after the grace)"

# (b) The node daemon restarts during the TERM grace: the kill deadline holds.
b=$(cq submit -- sh -c "$(stubborn b)")
wait_until 30 "job $b runs" job_state_is "$b" running
alloc=$(job_field "$b" allocation)
cq cancel "$b" >/dev/null
wait_until 10 "the node took the stop" test -f "$node_dir/allocations/$alloc/control/stop"
kill_node
start_cq
wait_until 30 "job $b is cancelled" job_state_is "$b" cancelled
[[ ! -e $work/b.finished ]] || fail "the job ran to its end after the node restarted in its grace"
pass "a node restarted during the TERM grace still kills the job at its deadline"

# (c) Cancelled while starting on an unreachable node: the start is never re-sent.
kill_node
c=$(cq submit -- sh -c "touch $work/c.ran")
wait_until 10 "job $c is placed" job_state_is "$c" starting
[[ $(cq cancel "$c") == "$c stopping" ]] || fail "cancel of the starting job did not answer stopping"
start_cq
wait_until 30 "job $c is cancelled" job_state_is "$c" cancelled
# The node took the stop first: a start for it now would be ignored.
[[ $(cq show "$c" --json | jq -r '.allocations[0].detail') == *"stopped before it started"* ]] ||
  fail "allocation detail: $(cq show "$c" --json | jq -r '.allocations[0].detail')"
[[ ! -e $work/c.ran ]] || fail "the cancelled job's workload ran when its node came back"
pass "a job cancelled while starting on an unreachable node never runs"
