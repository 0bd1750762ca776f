#!/usr/bin/env bash
# Issue 3, acceptance 3: a real coordinator with two real cq-node processes
# that report configured capacities (2 GiB, 2 CPUs each). A high-priority job
# submitted after low ones starts first; --after chains run in order and a
# failure cascades; cq show explains why a job waits.
source "$(dirname "$0")/lib.sh"
start_coordinator
for n in alpha beta; do
  code=$(cq node invite $n)
  cq-node --join "$CQ_URL" "$code" $n --state "$state/$n" --mem-total 2147483648 \
    --mem-available 2147483648 --cpus 2 >"$state/$n.log" 2>&1 &
  echo $! >"$state/$n.pid"
  wait_until 10 "node $n joins" bash -c "cq node ls --json | jq -e '.nodes[] | select(.name == \"$n\")'"
  cq node approve $n >/dev/null
done
wait_until 10 "both nodes are online" bash -c \
  "[[ \$(cq node ls --json | jq '[.nodes[] | select(.online)] | length') == 2 ]]"
pass "two nodes with 2 GiB each joined"

gate=$work/gate
mkdir -p "$gate"
hold() { echo "while [ ! -f $gate/$1 ]; do sleep 0.05; done"; }
b1=$(cq submit --name blocker1 --ram 2G -- sh -c "$(hold b1)")
b2=$(cq submit --name blocker2 --ram 2G -- sh -c "$(hold b2)")
wait_until 20 "both blockers run" bash -c "[[ \$(cq ls --json | jq '[.jobs[] | select(.state == \"running\")] | length') == 2 ]]"
low1=$(cq submit --name low1 --priority low --ram 2G -- true)
low2=$(cq submit --name low2 --priority low --ram 2G -- true)
high=$(cq submit --name high --priority high --ram 2G -- sh -c "$(hold high)")
[[ $(job_field "$low1" state) == queued && $(job_field "$high" state) == queued ]] ||
  fail "jobs did not queue behind the blockers"
why=$(cq show "$low1" --json | jq -r '.waiting[]')
grep -q "alpha: needs 2.0 GiB RAM" <<<"$why" || fail "show gives no RAM reason for alpha: $why"
grep -q "beta: needs 2.0 GiB RAM" <<<"$why" || fail "show gives no RAM reason for beta: $why"
cq show "$low1" | grep -q "^  waiting  " || fail "human show has no waiting line"
pass "cq show explains the wait per node: $(head -n 1 <<<"$why")"
[[ $(cq show "$high" --json | jq -r '.job.position') == 1 ]] || fail "high is not first in its level"

touch "$gate/b1"
wait_until 20 "the high-priority job starts" bash -c "[[ \$(cq show $high --json | jq -r .job.state) =~ ^(starting|running)$ ]]"
[[ $(job_field "$low1" state) == queued ]] || fail "low1 started before the high-priority job"
pass "the high-priority job submitted last started first"
touch "$gate/b2" "$gate/high"
wait_until 30 "the low jobs finish" bash -c "[[ \$(cq show $low2 --json | jq -r .job.state) == succeeded && \$(cq show $low1 --json | jq -r .job.state) == succeeded ]]"
pass "the low jobs ran after it"

out=$work/chain
a=$(cq submit --name a -- sh -c "sleep 0.3; echo a >>$out")
b=$(cq submit --name b --after "$a" -- sh -c "echo b >>$out")
c=$(cq submit --name c --after "$b" -- sh -c "echo c >>$out")
cq show "$c" --json | jq -e '.waiting[0] | test("waits for job")' >/dev/null ||
  fail "show of a dependent job does not name its dependency"
wait_until 30 "the chain finishes" bash -c "[[ \$(cq show $c --json | jq -r .job.state) == succeeded ]]"
[[ $(tr '\n' ' ' <"$out") == "a b c " ]] || fail "the chain ran as '$(tr '\n' ' ' <"$out")'"
pass "an --after chain ran in order"

bad=$(cq submit --name bad -- false)
after_bad=$(cq submit --name after-bad --after "$bad" -- true)
next=$(cq submit --name next --after "$after_bad" -- true)
wait_until 30 "the failure cascades" bash -c "[[ \$(cq show $next --json | jq -r .job.reason) == dependency_failed ]]"
[[ $(job_field "$after_bad" reason) == dependency_failed ]] || fail "direct dependent not failed"
pass "a failed dependency fails its dependents with dependency_failed"

set +e
cq submit --after 00000000-dead-beef-0000-000000000000 -- true >/dev/null 2>&1
rc=$?
set -e
[[ $rc -eq 3 ]] || fail "--after an unknown job exited $rc, not 3"
[[ $(cq ls --all --json | jq '.jobs | length') == 11 ]] || fail "a refused submit stored something"
pass "--after an unknown job is refused and stores nothing"
