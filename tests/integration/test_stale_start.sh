#!/usr/bin/env bash
# Issue 17, acceptance 2 (SPEC section 4, docs/adr/0023): a stale start order
# never runs a workload twice. The node daemon is paused (kill -STOP) before
# the coordinator places a job on it, so the start order waits in its socket;
# after the start timeout the coordinator fences the start and sends a stop,
# which queues behind it. Then the daemon is resumed (kill -CONT): it must not
# launch the expired start, and the job's next attempt must not start until
# the node has reported the first one ended. The workload's side effect
# happens exactly once, and no two attempts of the job are alive at once.
source "$(dirname "$0")/lib.sh"
# A short start timeout; heartbeats stay fresh and the node is never down
# while paused, so that the placement goes to the paused node and the start
# order is fenced by its own timeout, not by node loss.
start_coordinator "$CQ_URL" --start-timeout-ms 5000 --heartbeat-fresh-ms 600000 \
  --node-timeout 600s
code=$(cq node invite box)
cq-node --join "$CQ_URL" "$code" box --state "$state/box" --mem-total 2147483648 \
  --mem-available 2147483648 --cpus 2 --heartbeat-ms 200 >"$state/box.log" 2>&1 &
echo $! >"$state/box.pid"
node_pid=$(cat "$state/box.pid")
wait_until 10 "the node joins" bash -c "cq node ls --json | jq -e '.nodes[0].name == \"box\"'"
cq node approve box >/dev/null
wait_until 10 "the node is online" bash -c "cq node ls --json | jq -e '.nodes[0].online'"

marker=$work/side-effects
# Each attempt records its start and end (ns) with its allocation id.
workload="echo \"start \$CQ_ALLOCATION_ID \$(date +%s%N)\" >>$marker; sleep 1; \
echo \"end \$CQ_ALLOCATION_ID \$(date +%s%N)\" >>$marker"

kill -STOP "$node_pid"
job=$(cq submit --name stale --ram 64M -- sh -c "$workload")
wait_until 20 "the job is placed on the paused node" bash -c \
  "cq show $job --json | jq -e '.allocations | length >= 1'"
first=$(cq show "$job" --json | jq -r '.allocations[0].id')
wait_until 30 "the unanswered start is fenced" bash -c \
  "cq show $job --json | jq -e '.allocations[0].state == \"unknown\"'"
[[ ! -e $marker ]] || fail "the workload ran while its node was paused: $(cat "$marker")"
# Fenced, but the job is not started elsewhere or again while the node may
# still run the first attempt: it has one allocation.
[[ $(cq show "$job" --json | jq '.allocations | length') == 1 ]] ||
  fail "the job was placed again before its node reported the fenced attempt ended"
pass "the unanswered start order was fenced; the job waits for the node's report"

kill -CONT "$node_pid"
wait_until 60 "the job succeeds" job_state_is "$job" succeeded

starts=$(grep -c '^start ' "$marker" || true)
[[ $starts == 1 ]] || fail "the workload started $starts times: $(cat "$marker")"
ran=$(awk '/^start / {print $2}' "$marker")
[[ $ran != "$first" ]] || fail "the expired start order $first was launched"
r=$(cq show "$job" --json | jq -r --arg a "$first" '.allocations[] | select(.id == $a) | "\(.state):\(.reason)"')
[[ $r == finished:* ]] || fail "the fenced allocation ended as '$r'"
grep -qE "expired|stopped before it started" "$state/box.log" ||
  fail "the node's log does not say why it did not launch $first"
pass "after kill -CONT the node did not launch the stale start ($r); the side effect happened once, by $ran"

# No two attempts alive at once: every attempt's interval ends before the
# next one starts (here there is only one that ran, and the fenced one never
# started); and the node holds nothing now.
awk '/^start / {s[$2]=$3} /^end / {e[$2]=$3} END {
  n = 0; for (a in s) { if (!(a in e)) { print "no end for " a; exit 1 } n++ }
  for (a in s) for (b in s) if (a < b && s[a] < e[b] && s[b] < e[a]) { print a " overlaps " b; exit 1 }
}' "$marker" || fail "attempts overlapped: $(cat "$marker")"
wait_until 10 "the node lists nothing" bash -c \
  "cq node ls --json | jq -e '.nodes[0].running == 0'"
pass "no two attempts of the job were alive at once"
