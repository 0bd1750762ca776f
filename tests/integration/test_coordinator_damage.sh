#!/usr/bin/env bash
# Issue 7 item 11: damage is loud (SPEC section 10).
#  - cq.db deleted under a running coordinator: nothing more is acknowledged,
#    the coordinator stops naming the file, and it refuses to start again on
#    the state dir (it never starts silently empty, without its owner);
#  - a row that cannot be read stops the start, naming table and id, and
#    `cq-coordinator --check` lists every damaged row.
source "$(dirname "$0")/lib.sh"
start_cq
cstate=$state/coordinator
job=$(cq submit -- true)
wait_until 30 "job $job succeeds" job_state_is "$job" succeeded
cpid=$(cat "$state/coordinator.pid")
sqlite3 "$cstate/cq.db" ".backup '$work/backup.db'"
rm "$cstate/cq.db"
set +e
out=$(cq submit -- true 2>&1)
rc=$?
set -e
[[ $rc != 0 && $out == *"was deleted under the running coordinator"* ]] ||
  fail "a submit after cq.db was deleted: rc $rc: $out"
wait_until 10 "the coordinator stops" gone "$cpid"
grep -q "cq.db was deleted under the running coordinator" "$state/coordinator.log" ||
  fail "the coordinator did not say why it stopped: $(tail -n 3 "$state/coordinator.log")"
pass "cq.db deleted under the coordinator: nothing more acknowledged ($out), and it stopped saying why"
set +e
out=$(cq-coordinator --state "$cstate" --bind "$CQ_URL" 2>&1)
rc=$?
set -e
[[ $rc != 0 && $out == *"cq.db is missing"*"restore cq.db"* ]] || fail "restart without cq.db: rc $rc: $out"
[[ ! -e $cstate/cq.db ]] || fail "the refused start created a database"
pass "it refuses to start on the state dir without cq.db, and creates nothing"

# A damaged row.
cp "$work/backup.db" "$cstate/cq.db"
rm -f "$cstate/cq.db-wal" "$cstate/cq.db-shm"
cq-coordinator --state "$cstate" --check >"$work/check.out" || fail "--check of a sound database failed"
grep -q "no damaged rows" "$work/check.out" || fail "--check: $(cat "$work/check.out")"
sqlite3 "$cstate/cq.db" "UPDATE jobs SET argv = '[\"broken' WHERE id = '$job'"
set +e
out=$(cq-coordinator --state "$cstate" --check 2>&1)
rc=$?
set -e
[[ $rc == 1 && $out == *"jobs row $job: argv:"* ]] || fail "--check: rc $rc: $out"
pass "cq-coordinator --check names the damaged row (jobs row $job) and exits 1"
set +e
out=$(timeout 60 cq-coordinator --state "$cstate" --bind "$CQ_URL" 2>&1)
rc=$?
set -e
[[ $rc == 1 && $out == *"damaged row"*"jobs row $job"* ]] || fail "start with a damaged row: rc $rc: $out"
pass "the coordinator refuses to start on a damaged row, naming it (rc 1, no abort)"
