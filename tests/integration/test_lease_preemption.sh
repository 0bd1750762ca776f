#!/usr/bin/env bash
# Issue 9, acceptance 1: lease-boundary preemption with real processes. A low
# --preempt checkpoint job runs; a high job that needs its RAM arrives; at the
# low job's lease boundary (2 s) it sees its yield file, exits 6, is requeued
# at its old slot and resumes after the high job with CQ_RESUME=1 in the same
# state dir. A job that ignores the yield is stopped after the grace and
# requeued (preempted). A job that creates its own yield file and exits 6 fails.
source "$(dirname "$0")/lib.sh"
start_coordinator "$CQ_URL" --yield-grace 2s
code=$(cq node invite solo)
cq-node --join "$CQ_URL" "$code" solo --state "$state/solo" --mem-total 2147483648 \
  --mem-available 2147483648 --cpus 2 >"$state/solo.log" 2>&1 &
echo $! >"$state/solo.pid"
wait_until 10 "node solo joins" bash -c "cq node ls --json | jq -e '.nodes[] | select(.name == \"solo\")'"
cq node approve solo >/dev/null
wait_until 10 "solo is online" bash -c "cq node ls --json | jq -e '.nodes[0].online'"

log=$work/low.log
cat >"$work/checkpointing.sh" <<'SH'
#!/bin/sh
# A job that checkpoints on CQ_YIELD_FILE (docs/job-authors.md).
echo "attempt=$CQ_ATTEMPT resume=$CQ_RESUME state=$CQ_STATE_DIR" >>"$1"
if [ "$CQ_RESUME" = 1 ]; then
  [ -f "$CQ_STATE_DIR/checkpoint" ] && echo "resumed from $(cat "$CQ_STATE_DIR/checkpoint")" >>"$1"
  exit 0
fi
while [ ! -f "$CQ_YIELD_FILE" ]; do sleep 0.05; done
echo step-42 >"$CQ_STATE_DIR/checkpoint"
exit 6
SH
chmod +x "$work/checkpointing.sh"
low=$(cq submit --name low --priority low --preempt checkpoint --lease 2s --ram 2G -- \
  "$work/checkpointing.sh" "$log")
wait_until 20 "the low job runs" job_state_is "$low" running
high=$(cq submit --name high --priority high --ram 2G -- sh -c "echo high >>$log")
wait_until 20 "the high job succeeds" job_state_is "$high" succeeded
wait_until 20 "the low job succeeds" job_state_is "$low" succeeded
[[ $(job_field "$low" attempt) == 2 ]] || fail "the low job ran $(job_field "$low" attempt) times"
first=$(sed -n 1p "$log") high_line=$(sed -n 2p "$log") second=$(sed -n 3p "$log")
[[ $first == "attempt=1 resume=0 state="* && $high_line == high && $second == "attempt=2 resume=1 state="* ]] ||
  fail "unexpected order: $(cat "$log")"
[[ ${first#*state=} == "${second#*state=}" ]] || fail "the state dir changed: $(cat "$log")"
grep -q "resumed from step-42" "$log" || fail "the checkpoint was not found: $(cat "$log")"
reasons=$(cq show "$low" --json | jq -r '[.allocations[].reason] | join(",")')
[[ $reasons == "checkpointed," ]] || fail "allocation reasons: $reasons"
kinds=$(cq events "$low" --json | jq -r .kind | tr '\n' ' ')
[[ $kinds == "submitted placed started yield_requested checkpointed requeued placed started succeeded " ]] ||
  fail "events of the low job: $kinds"
pass "the low job yielded at its lease boundary, exited 6 and resumed after the high job ($kinds)"

# A job that ignores the yield: stopped after the 2 s grace, requeued, preempted.
stub=$(cq submit --name stubborn --priority low --preempt checkpoint --lease 2s --ram 2G -- \
  sh -c 'if [ "$CQ_ATTEMPT" = 1 ]; then sleep 60; fi')
wait_until 20 "the stubborn job runs" job_state_is "$stub" running
high2=$(cq submit --name high2 --priority high --ram 2G -- true)
wait_until 30 "the stubborn job is preempted and later succeeds" job_state_is "$stub" succeeded
[[ $(job_field "$high2" state) == succeeded ]] || fail "high2 is $(job_field "$high2" state)"
r=$(cq show "$stub" --json | jq -r '.allocations[0] | "\(.reason) \(.stop_cause)"')
[[ $r == "preempted yield" ]] || fail "the stubborn job's first allocation: $r"
cq events "$stub" --json | jq -s -e 'any(.kind == "preempted")' >/dev/null ||
  fail "no preempted event: $(cq events "$stub")"
first=$(cq show "$stub" --json | jq -r '.allocations[0].id')
cq logs "$stub" --allocation "$first" | grep -q "^cq-node: stopped: preempted: it was asked to yield" ||
  fail "the preempted attempt's output has no kill line: $(cq logs "$stub" --allocation "$first")"
pass "a job that ignored its yield was stopped after the grace and requeued ($r)"

# Exit 6 without a yield request is an ordinary failure.
self=$(cq submit --name self-yield --preempt checkpoint -- sh -c 'touch "$CQ_YIELD_FILE"; exit 6')
wait_until 20 "the self-yielding job ends" bash -c "[[ \$(cq show $self --json | jq -r .job.state) =~ ^(failed|succeeded|cancelled)$ ]]"
r=$(cq show "$self" --json | jq -r '"\(.job.state) \(.job.reason) \(.job.exit_code) \(.job.attempt)"')
[[ $r == "failed exit_code 6 1" ]] || fail "a job that made its own yield file and exited 6 is: $r"
pass "a job that created its own yield file and exited 6 failed ($r)"

# cq preempt: only a running checkpointing job.
# (A job that outlives the check: a finished one is refused for being finished.)
never=$(cq submit --name never -- sleep 600)
out=$(cq preempt "$never" 2>&1) && fail "cq preempt of a --preempt never job succeeded"
grep -q "preempt checkpoint" <<<"$out" || fail "refusal does not say why: $out"
cq cancel "$never" >/dev/null
pass "cq preempt refuses a job without --preempt checkpoint: $out"
