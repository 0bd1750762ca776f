#!/usr/bin/env bash
# Commands over many jobs. `cq wait` on an array asks about each task a
# bounded number of times while the array drains, counted by the coordinator's cq_api_requests_total: it
# asks about the tasks that ended, not about every pending task on every
# event of any of them (which was quadratic in the array's size, and halved
# a local node's drain while someone waited). It still exits 0 only once
# every task succeeded, and 5 when one failed.
source "$(dirname "$0")/lib.sh"
hp=$(free_port)
start_coordinator "$CQ_URL" --http "127.0.0.1:$hp"
join_node m1 --mem-total 8589934592 --mem-available 8589934592 --cpus 4
base=http://127.0.0.1:$hp
# requests OP: how many OP requests the coordinator counted so far.
requests() {
  http_get "$base/metrics" | awk -v k="cq_api_requests_total{op=\"$1\"}" \
    '$1 == k {print $2; found=1} END {if (!found) print 0}'
}

n=120 # above the 64 ids a wait names in one read: it reads every job's events
arr=$(cq submit -q --array "1-$n" --ram 16M -- true)
before=$(requests show)
timeout 120 cq wait "$arr" >"$work/wait.out" 2>"$work/wait.err" ||
  fail "cq wait of the array exited $?: $(tail -3 "$work/wait.err")"
shows=$(($(requests show) - before))
[[ $(grep -c ' succeeded$' "$work/wait.out") == "$n" ]] ||
  fail "cq wait printed $(grep -c ' succeeded$' "$work/wait.out") succeeded tasks, not $n"
# Each task: its first look and its end, plus the first pending one per
# round (up to one per event read): linear; the quadratic wait made 2,842.
((shows <= 5 * n)) || fail "cq wait of $n tasks asked about them $shows times"
# One explanation at a time (the head's), not one line per queued task.
(($(wc -l <"$work/wait.err") <= 20)) ||
  fail "cq wait said why tasks wait in $(wc -l <"$work/wait.err") lines: $(head -3 "$work/wait.err")"
pass "cq wait of $n tasks: $shows show requests, $(wc -l <"$work/wait.err") lines of why they wait"

few=$(cq submit -q --array 1-5 -- sh -c '[ "$CQ_ARRAY_INDEX" != 3 ]')
rc=0
timeout 60 cq wait "$few" >"$work/few.out" 2>&1 || rc=$?
[[ $rc == 5 ]] || fail "cq wait with a failed task exited $rc: $(cat "$work/few.out")"
grep -q "1 of 5 job(s) did not succeed: .* failed (exit 1)" "$work/few.out" ||
  fail "cq wait said: $(cat "$work/few.out")"
pass "cq wait of a named few exits 5 when one failed, and says which and how"

# cq hold, cq release and cq cancel of many jobs send their requests
# pipelined (an array's thousand commit together): each task once, the
# replies printed in the order the jobs were given, and a refusal in the
# middle reported without stopping the rest.
big=$(cq submit -q --hold-for-node --cpus 64 --array 1-150 -- true) # never fits m1
cq hold "$big" >"$work/hold.out" || fail "cq hold of the array exited $?"
grep -qx "array $big: 150 of 150 tasks: 150 on hold" "$work/hold.out" || fail "cq hold said: $(head -3 "$work/hold.out")"
cq release "$big" >"$work/release.out" || fail "cq release of the array exited $?"
grep -qx "array $big: 150 of 150 tasks: 150 released" "$work/release.out" || fail "cq release said: $(head -3 "$work/release.out")"
first=$(cq submit -q --hold-for-node --cpus 64 -- true)
last=$(cq submit -q --hold-for-node --cpus 64 -- true)
done_one=$(head -1 "$work/wait.out" | cut -d" " -f1) # a task that ended
before=$(requests cancel)
rc=0
cq cancel "$first" "$done_one" "$big" "$last" >"$work/cancel.out" 2>"$work/cancel.err" || rc=$?
[[ $rc == 5 ]] || fail "cq cancel with a finished job among them exited $rc: $(cat "$work/cancel.err")"
grep -q "invalid_state" "$work/cancel.err" || fail "the finished job's refusal: $(cat "$work/cancel.err")"
# The array in one line, at its place among the jobs given.
[[ $(cat "$work/cancel.out") == "$first cancelled"$'\n'"array $big: 150 of 150 tasks: 150 cancelled"$'\n'"$last cancelled" ]] ||
  fail "cq cancel's lines are not one a job (the array's one) in the order given: $(cat "$work/cancel.out")"
[[ $(($(requests cancel) - before)) == 153 ]] || fail "cq cancel sent $(($(requests cancel) - before)) requests for 153 jobs"
[[ $(cq ls --json | jq '[.jobs[] | select(.state != "cancelled")] | length') == 0 ]] ||
  fail "live jobs after the cancel: $(cq ls)"
pass "cq hold, release and cancel of 150 tasks: every one once, the array in one line, in order, a refusal in the middle said"

# cq run (and cq logs -f) pause between reads of the output on the job's
# events, not a fixed sleep: its end ends the pause, so a short job's run
# returns at its end (it took at least one 200 ms poll before).
ev=$(requests events)
out=$(cq run --ram 16M -- sh -c 'echo one; sleep 0.5; echo two; exit 3' 2>"$work/run.err") && rc=0 || rc=$?
[[ $rc == 3 && $out == $'one\ntwo' ]] || fail "cq run printed '$out' and exited $rc: $(cat "$work/run.err")"
(($(requests events) > ev)) || fail "cq run did not wait on the job's events"
pass "cq run follows the output, waits on the job's events between reads, and exits with the job's code"

# Two names for one job in one cancel: an array and one of its tasks. The
# task's second cancel reaches a job that the first one ended meanwhile: it
# is refused as ended (invalid_state, exit 5), not an internal error; the
# same id twice is asked once.
trio=$(cq submit -q --hold-for-node --cpus 64 --array 1-3 -- true)
task=$(cq ls --json | jq -r --arg a "$trio" '[.jobs[] | select(.array == $a)][0].id')
[[ $task == ????????-* ]] || fail "no task of $trio listed: $(cq ls --json | head -c 300)"
rc=0
cq cancel "$trio" "${task:0:13}" >"$work/twice.out" 2>"$work/twice.err" || rc=$? # a prefix: not the same text
[[ $rc == 0 || ($rc == 5 && $(cat "$work/twice.err") == *"already ended (cancelled)"*) ]] ||
  fail "cq cancel ARRAY TASK exited $rc: $(cat "$work/twice.err")"
! grep -q internal "$work/twice.err" || fail "an internal error: $(cat "$work/twice.err")"
one=$(cq submit -q --hold-for-node --cpus 64 -- true)
cq cancel "$one" "$one" >"$work/same.out" || fail "cq cancel JOB JOB exited $?"
[[ $(wc -l <"$work/same.out") == 1 ]] || fail "cq cancel JOB JOB printed: $(cat "$work/same.out")"
pass "a job named twice in one cancel: asked once, or refused as already ended (exit 5)"
