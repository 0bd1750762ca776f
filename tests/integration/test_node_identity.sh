#!/usr/bin/env bash
# Issue 7 item 1: one node identity is one daemon (SPEC section 10). A copied
# node.toml in a second state dir is refused while the first daemon
# heartbeats, so a burst of jobs runs each exactly once; a second cq-node on
# the same state dir does not start; a second invite for a joined name is
# refused unless the Owner replaces it (the old token is revoked at once and
# the node needs approval again).
source "$(dirname "$0")/lib.sh"
start_cq
node_dir=$state/node
name=$(cat "$state/node.name")

# A copy of the node's identity in a second state dir.
mkdir -p "$work/copy"
cp "$node_dir/node.toml" "$work/copy/node.toml"
cq-node --state "$work/copy" >"$work/copy.log" 2>&1 &
copy_pid=$!
wait_until 10 "the copy is refused" grep -q "ANOTHER cq-node SPEAKS FOR NODE" "$work/copy.log"
pass "a second daemon with a copied node.toml is refused while the first one heartbeats"

# A burst: every job appends its id to one file; each must appear exactly once.
runs=$work/runs
: >"$runs"
[[ $(cq-test-load submit-burst "$CQ_URL" "$(owner_token)" 200 "$runs") == 200 ]] ||
  fail "the burst was not acknowledged"
wait_until 120 "all 200 jobs end" bash -c "[[ \$(cq ls --json | jq '.jobs | length') == 0 ]]"
[[ $(cq ls --all --json | jq '[.jobs[] | select(.state == "succeeded")] | length') == 200 ]] ||
  fail "not every job succeeded: $(cq ls --all --json | jq -c '[.jobs[].state] | group_by(.) | map({(.[0]): length}) | add')"
twice=$(sort "$runs" | uniq -d | wc -l)
[[ $(wc -l <"$runs") == 200 && $twice == 0 ]] ||
  fail "$(wc -l <"$runs") runs for 200 jobs, $twice job(s) ran twice"
! grep -q "started pid" "$work/copy.log" || fail "the copied daemon started a workload"
pass "200 jobs submitted in a burst ran exactly once each, none on the copy"

# A second daemon on the same state dir does not even start.
set +e
out=$(timeout 60 cq-node --state "$node_dir" 2>&1)
rc=$?
set -e
[[ $rc == 5 && $out == *"already runs on the state directory"* ]] ||
  fail "a second cq-node on $node_dir: rc $rc: $out"
pass "a second cq-node on the same state dir exits 5 naming the running one"

# A second invite for the joined name is refused; --replace revokes the old token.
set +e
out=$(cq node invite "$name" 2>&1)
rc=$?
set -e
[[ $rc == 5 && $out == *already_exists*--replace* ]] || fail "re-invite of $name: rc $rc: $out"
pass "re-inviting a joined node is refused (exit 5), pointing at --replace"
code=$(cq node invite "$name" --replace)
[[ $(cq node ls --json | jq -r ".nodes[] | select(.name == \"$name\") | .state") == pending ]] ||
  fail "a replaced node is not pending approval"
kill "$copy_pid" 2>/dev/null || true
wait_until 10 "the old daemon's token is refused" grep -q "REJECTS THIS NODE'S TOKEN" "$state/node.log"
pass "--replace revokes the old token at once and the node needs approval again"
mkdir -p "$work/new"
cq-node --join "$CQ_URL" "$code" "$name" --state "$work/new" >"$work/new.log" 2>&1 &
new_pid=$!
wait_until 10 "the new daemon joined" grep -q "pending approval" "$work/new.log"
cq node approve "$name" >/dev/null
job=$(cq submit -- sh -c 'echo on-new')
wait_until 30 "job $job succeeds" job_state_is "$job" succeeded
grep -q "started pid" "$work/new.log" || fail "the job did not run on the new daemon"
kill "$new_pid"
pass "the new daemon joins under the name and, once approved, runs the work"
