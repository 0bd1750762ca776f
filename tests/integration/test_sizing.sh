#!/usr/bin/env bash
# Issue 19, acceptance 3: sizing never surprises. A command first measured
# at 10 MiB gets a profile-derived cap; rerun with input that needs 200 MiB,
# with no flag, it is killed at that cap, requeued at once with more (at
# least the default), and succeeds on its second attempt: the submit said on
# stderr how it was sized (the profile), the second attempt's output names
# the first OOM, the first's ends with its kill line. An explicit --ram still
# fails on the first OOM. A cap below 16 MiB is refused naming --ram.
# `cq profile rm` forgets a profile: the next job gets the default again.
source "$(dirname "$0")/lib.sh"
start_cq
# grow.sh holds $work/size MiB for a moment (tail keeps its input in memory).
cat >"$work/grow.sh" <<'SCRIPT'
mib=$(cat "$(dirname "$0")/size")
head -c $((mib * 1048576)) /dev/zero | { sleep 1; tail -c $((mib * 1048576)); } >/dev/null
echo "held $mib MiB"
SCRIPT
echo 10 >"$work/size"
first=$(cq submit -- sh "$work/grow.sh" 2>"$work/first.err")
grep -q "the default: no run of profile 'sh $work/grow.sh'" "$work/first.err" ||
  fail "the first submit did not say it got the default cap: $(cat "$work/first.err")"
wait_until 30 "the 10 MiB run succeeds" job_state_is "$first" succeeded
wait_until 10 "the profile has its run" bash -c \
  "cq profile ls --json | jq -e --arg k 'sh $work/grow.sh' '.profiles[] | select(.key == \$k) | .runs == 1'"
pass "the first run: $(cat "$work/first.err")"

echo 200 >"$work/size"
job=$(cq submit -- sh "$work/grow.sh" 2>"$work/second.err")
grep -q "from profile 'sh $work/grow.sh' (1 run, largest peak" "$work/second.err" ||
  fail "the rerun's submit did not name its profile: $(cat "$work/second.err")"
cap=$(job_field "$job" effective_ram_bytes)
((cap < 200 * 1048576)) || fail "the profile-derived cap $cap is not below what the rerun needs"
wait_until 60 "the rerun succeeds" job_state_is "$job" succeeded
allocs=$(cq show "$job" --json | jq -c '[.allocations[] | .reason]')
[[ $allocs == '["oom","none"]' || $allocs == '["oom",""]' ]] ||
  fail "the rerun's attempts ended $allocs, not an oom and then a success"
cq logs "$job" | head -n 1 | grep -q "^cq-node: attempt 2: an earlier attempt was killed for using more memory than its RAM cap" ||
  fail "the second attempt's output does not name the first OOM: $(cq logs "$job")"
cq logs "$job" | grep -q "held 200 MiB" || fail "the second attempt did not finish: $(cq logs "$job")"
one=$(cq show "$job" --json | jq -r '.allocations[0].id')
cq logs "$job" --allocation "$one" | tail -n 1 | grep -q "^cq-node: killed: out of memory" ||
  fail "the first attempt's output has no kill line"
pass "profile cap $((cap / 1048576)) MiB: killed, requeued with $(($(job_field "$job" effective_ram_bytes) / 1048576)) MiB, succeeded; $(cq logs "$job" | head -n 1)"

# An explicit --ram is the submitter's word: the first OOM is final.
explicit=$(cq submit --ram 64M -- sh "$work/grow.sh" 2>"$work/explicit.err")
[[ ! -s $work/explicit.err ]] || fail "a submit with --ram said how it was sized: $(cat "$work/explicit.err")"
wait_until 60 "the explicit job fails" job_state_is "$explicit" failed
[[ $(job_field "$explicit" reason) == oom ]] || fail "the explicit job ended $(job_field "$explicit" reason)"
[[ $(cq show "$explicit" --json | jq '.allocations | length') == 1 ]] || fail "an explicit --ram was retried"
pass "--ram 64M: failed oom on its first attempt, not retried"

# Too small a cap is refused, naming the flag; nothing is queued.
before=$(cq ls --all --json | jq '.jobs | length')
set +e
out=$(cq submit --ram 100K -- true 2>&1)
rc=$?
set -e
[[ $rc == 2 && $out == *"--ram: 100K is below the smallest cap, 16M"* ]] ||
  fail "--ram 100K: exit $rc, '$out'"
[[ $(cq ls --all --json | jq '.jobs | length') == "$before" ]] || fail "a refused submit queued a job"
pass "--ram 100K refused: $out"

# Forgetting the profile: the next job is sized by the default again.
cq profile rm "sh $work/grow.sh" | grep -q "forgot profile" || fail "cq profile rm said nothing"
set +e
out=$(cq profile rm "sh $work/grow.sh" 2>&1)
rc=$?
set -e
[[ $rc == 3 && $out == *"no profile"* ]] || fail "removing it again: exit $rc, '$out'"
echo 10 >"$work/size"
again=$(cq submit -- sh "$work/grow.sh" 2>"$work/again.err")
grep -q "the default: no run of profile" "$work/again.err" ||
  fail "after cq profile rm the job was not sized by the default: $(cat "$work/again.err")"
[[ $(job_field "$again" effective_ram_bytes) == $((1 << 30)) ]] || fail "not the 1 GiB default"
pass "cq profile rm forgot it: the next job got the default cap again"

# A long command's profile key is cut in the note (cq profile ls has it whole).
long=$(cq submit --cpus 0 -- python3 -c 'import time
for i in range(3):
    print("step", i, "of a long training loop with many words")' 2>"$work/long.err")
note=$(cat "$work/long.err")
[[ $note == *"no run of profile 'python3 -c import time\\nfor i in range(…' measured yet"* ]] ||
  fail "the note on a long command: $note"
pass "a long command's key is cut in the note: $note"
wait_until 30 "the long command's job ends" bash -c "[[ \$(cq show $long --json | jq -r .job.state) == succeeded ]]"
