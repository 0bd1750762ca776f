#!/usr/bin/env bash
# Issue 19, acceptance 2: an array of 20 with %3 never has more than 3 tasks
# running; each task sees CQ_ARRAY_ID and CQ_ARRAY_INDEX and is named
# NAME-INDEX; cq ls shows the array as one row (--expand: one per task);
# cq wait, cq show and cq cancel take the array's id.
source "$(dirname "$0")/lib.sh"
start_cq

arr=$(cq submit -q --array 0-19%3 --cpus 0 --name sweep -- \
  sh -c 'echo "task $CQ_ARRAY_INDEX of $CQ_ARRAY_ID"; sleep 0.3')
[[ $arr =~ ^[0-9a-f-]{36}$ ]] || fail "submit --array printed '$arr', not an array id"
[[ $(cq ls --all --json | jq --arg a "$arr" '[.jobs[] | select(.array == $a)] | length') == 20 ]] ||
  fail "the array does not have 20 tasks"
peak=0
# running_now: how many of the array's tasks hold allocations; keeps the peak.
running_now() {
  local n
  n=$(cq ls --json | jq --arg a "$arr" \
    '[.jobs[] | select(.array == $a and (.state == "starting" or .state == "running" or .state == "stopping"))] | length')
  ((n > peak)) && peak=$n
  echo "$n" >>"$work/running.samples"
  ((n <= 3)) || fail "$n tasks of the %3 array hold allocations at once"
  [[ $(cq ls --json | jq --arg a "$arr" '[.jobs[] | select(.array == $a)] | length') == 0 ]]
}
wait_until 120 "all 20 tasks end" running_now
((peak == 3)) || fail "the %3 array ran at most $peak tasks at once (its tasks need no CPU)"
pass "an array of 20 with %3: at most 3 at once (peak $peak over $(wc -l <"$work/running.samples") samples)"

cq wait "$arr" >/dev/null || fail "cq wait of the array: $(cq wait "$arr" 2>&1)"
[[ $(cq logs sweep-7) == "task 7 of $arr" ]] || fail "task 7 printed: $(cq logs sweep-7)"
pass "each task sees CQ_ARRAY_ID and CQ_ARRAY_INDEX, and is named NAME-INDEX"

rows=$(COLUMNS=200 cq ls --all | grep -c "sweep")
[[ $rows == 1 ]] || fail "cq ls shows the array in $rows rows: $(cq ls --all)"
wide=$(COLUMNS=200 cq ls --all)
grep -q "sweep\[20\] .*succeeded .*20 done (%3)" <<<"$wide" || fail "the array's row: $wide"
[[ $(cq ls --all --expand | grep -c "sweep-") == 20 ]] || fail "--expand does not show 20 rows"
shown=$(cq show "$arr")
grep -q "Array $arr: 20 tasks" <<<"$shown" || fail "cq show of the array: $shown"
pass "cq ls folds the array into one row; --expand and cq show list its tasks"

EXPECT_RC=5 expect_refused "invalid_state: array $arr: all 20 of its tasks have already ended" \
  cancel "$arr"
EXPECT_RC=5 expect_refused "invalid_state: array $arr: all 20 of its tasks have already ended" \
  hold "$arr"
pass "cq cancel and cq hold of an array whose tasks all ended say so"

report=$(cq submit -q --name report --after "${arr:0:8}" -- true)
[[ $(job_field "$report" 'after | length') == 20 ]] || fail "--after the array: $(job_field "$report" after)"
wait_until 30 "the job after the array succeeds" job_state_is "$report" succeeded
pass "--after an array's id waits for every one of its tasks"

big=$(cq submit -q --array 0-9%2 --name long -- sleep 300)
wait_until 30 "two tasks run" bash -c \
  "[[ \$(cq ls --json | jq --arg a $big '[.jobs[] | select(.array == \$a and .state == \"running\")] | length') == 2 ]]"
# cq hold of an array two of whose tasks run: those two are refused (exit
# 5), the rest held, one line; --json is JSON alone, every task in it.
set +e
cq hold "$big" >"$work/hold.out" 2>"$work/hold.err"
hrc=$?
held=$(cq release "$big" --json 2>/dev/null)
set -e
[[ $hrc == 5 && $(cat "$work/hold.out") == "array $big: 8 of 10 tasks: 8 on hold" ]] ||
  fail "cq hold of an array with running tasks: exit $hrc: $(cat "$work/hold.out" "$work/hold.err")"
jq -e '.jobs | length == 10' <<<"$held" >/dev/null || fail "cq release --json of the array: $held"
cq cancel "${big:0:8}" >"$work/cancel.out"
# One line for the array (10,000 tasks printed 10,000 lines).
grep -qx "array $big: 10 of 10 tasks: 8 cancelled, 2 stopping" "$work/cancel.out" ||
  fail "cancel of the array: $(cat "$work/cancel.out")"
wait_until 30 "every task of the cancelled array ends cancelled" bash -c \
  "[[ \$(cq ls --all --json | jq --arg a $big '[.jobs[] | select(.array == \$a and .state == \"cancelled\")] | length') == 10 ]]"
pass "cq cancel of an array's id prefix cancels its 10 tasks"

# An array some of whose tasks ended: the rest are cancelled, in one line,
# exit 0 (the ended ones are not errors).
part=$(cq submit -q --array 0-3%1 --name part -- sh -c '[ "$CQ_ARRAY_INDEX" -lt 2 ] || exec sleep 300')
wait_until 30 "task 2 runs after 0 and 1 ended" bash -c \
  "[[ \$(cq ls --all --json | jq -r --arg a $part '[.jobs[] | select(.array == \$a) | .state] | sort | join(\" \")') == 'queued running succeeded succeeded' ]]"
cq cancel "$part" >"$work/cancel3.out" || fail "cancel of a partly ended array exited $?: $(cat "$work/cancel3.out")"
grep -qx "array $part: 2 of 4 tasks: 1 cancelled, 1 stopping (2 had already ended)" "$work/cancel3.out" ||
  fail "cancel of a partly ended array: $(cat "$work/cancel3.out")"
pass "cq cancel of a partly ended array: one line, exit 0"

# An array answers to its name too, as cq ls draws it (sweep[20]): the one
# array of that name, else the one of that name with tasks not ended; two
# ended arrays of one name are ambiguous, and the error lists both.
grep -q "Array $arr: 20 tasks" <<<"$(cq show sweep)" || fail "cq show sweep: $(cq show sweep 2>&1)"
again=$(cq submit -q --array 0-2 --name sweep -- sleep 300)
grep -q "Array $again: 3 tasks" <<<"$(cq show sweep)" ||
  fail "cq show sweep, beside a live array of that name: $(cq show sweep 2>&1)"
named=$(cq submit -q --after sweep -- true)
[[ $(job_field "$named" 'after | length') == 3 ]] || fail "--after sweep: $(job_field "$named" after)"
cq cancel sweep >"$work/cancel2.out"
[[ $(wc -l <"$work/cancel2.out") == 1 ]] || fail "cq cancel sweep: $(cat "$work/cancel2.out")"
wait_until 30 "the second sweep's tasks end" bash -c \
  "[[ \$(cq ls --all --json | jq --arg a $again '[.jobs[] | select(.array == \$a and .state == \"cancelled\")] | length') == 3 ]]"
EXPECT_RC=2 expect_refused "job: 'sweep' is the name of 2 arrays:" show sweep
both=$(cq show sweep 2>&1 || true)
[[ $both == *"${arr:0:8} (ended)"* && $both == *"${again:0:8} (ended)"* ]] ||
  fail "the ambiguous name's error does not list both arrays: $both"
EXPECT_RC=2 expect_refused "after: job: 'sweep' is the name of 2 arrays" submit --after sweep -- true
pass "an array answers to its name: show, cancel, --after; two ended arrays of one name are refused"

printf '%s\n' '# a comment' 'echo one' '' 'echo "two words" | tr a-z A-Z' 'echo three; exit 3' >"$work/jobs.txt"
from=$(cq submit -q --from "$work/jobs.txt" --array %2 --cpus 0)
[[ $(cq ls --all --json | jq --arg a "$from" '[.jobs[] | select(.array == $a)] | length') == 3 ]] ||
  fail "--from made $(cq ls --all --json | jq --arg a "$from" '[.jobs[] | select(.array == $a)] | length') tasks of 3 commands"
cq wait "$from" >/dev/null 2>&1 || true
[[ $(cq logs jobs-0) == one && $(cq logs jobs-1) == "TWO WORDS" ]] ||
  fail "--from tasks printed '$(cq logs jobs-0)' and '$(cq logs jobs-1)'"
[[ $(job_field jobs-2 state) == failed && $(job_field jobs-2 exit_code) == 3 ]] ||
  fail "the third command ended $(job_field jobs-2 state)"
expect_refused "--from: no command in" submit --from /dev/null
expect_refused "with --from it takes only a limit" submit --from "$work/jobs.txt" --array 0-3
pass "cq submit --from FILE: one task per command line (comments and blanks skipped), one array"

# Lines of JSON specs: each a job of its own with its own options (the
# command line's are the defaults), a plain line among them runs through
# sh -c; every line is checked before any is sent, a refusal names its line.
cat >"$work/specs.txt" <<'SPECS'
# each line its own job
{"command": ["sh", "-c", "echo small $WHO"], "name": "spec-small", "ram": "64M", "env": {"WHO": "one"}}
{"shell": "echo big", "name": "spec-big", "ram": 268435456, "cpus": 0, "after": "spec-small"}
echo plain
SPECS
specs=$(cq submit -q --from "$work/specs.txt" --cpus 0)
[[ $(wc -l <<<"$specs") == 3 ]] || fail "--from of JSON lines printed: $specs"
timeout 60 cq wait $specs >/dev/null || fail "the JSON lines' jobs did not all succeed: $(cq ls --all)"
[[ $(job_field spec-small ram_bytes) == 67108864 && $(job_field spec-big ram_bytes) == 268435456 ]] ||
  fail "each line's --ram: $(job_field spec-small ram_bytes) $(job_field spec-big ram_bytes)"
[[ $(job_field spec-big after) == *"$(job_field spec-small id)"* ]] || fail "spec-big is not after spec-small"
[[ $(cq logs spec-small) == "small one" && $(cq logs "$(tail -n 1 <<<"$specs")") == plain ]] ||
  fail "the JSON lines' jobs printed '$(cq logs spec-small)'"
before=$(cq ls --all --json | jq '.jobs | length')
printf '{"command": ["true"]}\n{"command": ["true"], "ram": "lots"}\n' >"$work/bad.txt"
expect_refused "--from: line 2: --ram: size 'lots' is not a number" submit --from "$work/bad.txt"
printf '{"comand": ["true"]}\n' >"$work/bad.txt"
expect_refused "--from: line 1: unknown key \"comand\"" submit --from "$work/bad.txt"
[[ $(cq ls --all --json | jq '.jobs | length') == "$before" ]] || fail "a refused --from submitted some of its lines"
pass "cq submit --from FILE of JSON specs: a job per line with its own options; a bad line sends none"

# cq logs of an array says how to name one task; cq events of it reads every task's.
sweep=$(cq submit -q --cpus 0 --name logsweep --array 1-3 -- sh -c 'echo task $CQ_ARRAY_INDEX')
timeout 60 cq wait "$sweep" >/dev/null || fail "the logsweep array did not succeed"
EXPECT_RC=2 expect_refused "'logsweep' is an array of 3 tasks, and cq logs reads one task's output: name a task (logsweep-1, ...)" \
  logs logsweep
[[ $(cq logs logsweep-2) == "task 2" ]] || fail "cq logs logsweep-2 printed $(cq logs logsweep-2)"
EXPECT_RC=2 expect_refused "'logsweep' is an array of 3 tasks, and cq retry submits one finished job again: name a task (logsweep-1, ...)" \
  retry logsweep
ended=$(cq events "$sweep" --json | jq -r 'select(.kind == "succeeded") | .job' | sort -u | wc -l)
[[ $ended == 3 ]] || fail "cq events of the array showed $ended tasks' ends, not 3"
timeout 60 cq events -f "$sweep" >"$work/sweep_events.out" ||
  fail "cq events -f of an ended array exited $? (124: it did not end)"
[[ $(grep -c " succeeded" "$work/sweep_events.out") == 3 ]] || fail "cq events -f of the array: $(cat "$work/sweep_events.out")"
pass "cq logs of an array names how to read a task; cq events (-f) of it reads all three tasks, and ends"

# cq wait of an array that failed names its tasks by name, not by id.
bad=$(cq submit -q --cpus 0 --name badsweep --array 1-2 -- false)
rc=0
out=$(cq wait "$bad" 2>&1) || rc=$?
[[ $rc == 5 && $out == *"2 of 2 job(s) did not succeed: badsweep-1 failed (exit 1), badsweep-2 failed (exit 1)"* ]] ||
  fail "cq wait of a failed array: exit $rc: $out"
pass "cq wait names a failed array's tasks: $out"
