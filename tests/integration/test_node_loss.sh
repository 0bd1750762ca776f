#!/usr/bin/env bash
# Issue 9, acceptance 2: node loss with fencing, real processes. kill -STOP
# of a node daemon: the node is down after --node-timeout, its job's
# allocation unknown, then lost and the job requeued on another node after
# --lost-after. kill -CONT: the node stops the stale allocation, its report
# changes nothing, and the job ran to success exactly once, on the other node.
source "$(dirname "$0")/lib.sh"
start_coordinator "$CQ_URL" --node-timeout 2s --lost-after 3s
join() {
  local code
  code=$(cq node invite "$1")
  cq-node --join "$CQ_URL" "$code" "$1" --state "$state/$1" --mem-total 2147483648 \
    --mem-available 2147483648 --cpus 2 --heartbeat-ms 200 >"$state/$1.log" 2>&1 &
  echo $! >"$state/$1.pid"
  wait_until 10 "node $1 joins" bash -c "cq node ls --json | jq -e '.nodes[] | select(.name == \"$1\")'"
  cq node approve "$1" >/dev/null
  wait_until 10 "$1 is online" bash -c "cq node ls --json | jq -e '.nodes[] | select(.name == \"$1\" and .online)'"
}
join alpha
marker=$work/ran
# Attempt 1 outlives the test unless stopped; attempt 2 succeeds at once.
job=$(cq submit --name survivor --ram 2G -- sh -c \
  "if [ \"\$CQ_ATTEMPT\" = 1 ]; then exec sleep 31.7; fi; echo \"\$CQ_ATTEMPT \$CQ_ALLOCATION_ID\" >>$marker")
wait_until 20 "the job runs on alpha" job_state_is "$job" running
first=$(job_field "$job" allocation)
join beta
alpha=$(cat "$state/alpha.pid")
kill -STOP "$alpha"
wait_until 10 "alpha is down" bash -c "cq node ls --json | jq -e '.nodes[] | select(.name == \"alpha\" and .down)'"
wait_until 5 "the allocation is unknown" bash -c \
  "[[ \$(cq show $job --json | jq -r '.allocations[0].state') == unknown ]]"
cq show "$job" | grep -q "is unknown" || fail "cq show does not say the allocation is unknown"
pass "alpha is down after the node timeout; its allocation is unknown"
wait_until 15 "the job succeeds on beta" job_state_is "$job" succeeded
r=$(cq show "$job" --json | jq -r '[.allocations[] | "\(.node):\(.state):\(.reason)"] | join(" ")')
[[ $r == "alpha:finished:lost beta:finished:" ]] || fail "allocations: $r"
kinds=$(cq events "$job" --json | jq -r .kind | tr '\n' ' ')
[[ $kinds == "submitted placed started lost requeued placed started succeeded " ]] ||
  fail "events: $kinds"
pass "after lost-after the allocation was lost and the job ran on beta ($r)"

stale=$(pgrep -f "sleep 31[.]7" || true)
[[ -n $stale ]] || fail "the stale workload on alpha is not running any more (nothing to fence)"
kill -CONT "$alpha"
wait_until 15 "alpha stops the stale allocation" bash -c "! pgrep -f 'sleep 31[.]7' >/dev/null"
wait_until 10 "alpha lists nothing" bash -c \
  "cq node ls --json | jq -e '.nodes[] | select(.name == \"alpha\" and .online and .down == false and .running == 0)'"
# alpha lists an allocation until its exit report is acknowledged: it was.
after=$(cq show "$job" --json | jq -r '"\(.job.state) \(.job.attempt) \(.job.node) \(.allocations[0].reason)"')
[[ $after == "succeeded 2 beta lost" ]] || fail "alpha's report changed the job: $after"
[[ $(wc -l <"$marker") == 1 && $(cut -d' ' -f1 "$marker") == 2 ]] ||
  fail "the job did not succeed exactly once: $(cat "$marker")"

pass "alpha stopped the given-away allocation; its report changed nothing; one success ($after)"
