#!/usr/bin/env bash
# Issue 9, acceptance 4: every job's event seq is gapless across a kill -9 of
# the coordinator; `cq events --follow` resumes after the restart without
# gaps, and repeats nothing (at-least-once, deduplicated by job and seq, is
# allowed; this checks there is nothing to deduplicate); `cq wait` exits 0
# when all succeeded and 5 otherwise.
source "$(dirname "$0")/lib.sh"
start_cq
gate=$work/gate
follow=$work/follow.jsonl
# --since 0: every event from the first (without it the follower starts from
# the moment it asks, and a submit just before that is not followed).
cq events --follow --json --since 0 >"$follow" 2>"$work/follow.err" &
follower=$!
trap 'kill $follower 2>/dev/null || true; cleanup' EXIT
jobs=()
for i in 1 2 3; do
  jobs+=("$(cq submit --name "ev$i" -- sh -c "while [ ! -f $gate ]; do sleep 0.05; done; echo $i")")
done
bad=$(cq submit --name bad -- sh -c "while [ ! -f $gate ]; do sleep 0.05; done; exit 3")
wait_until 30 "the jobs run" bash -c "[[ \$(cq ls --json | jq '[.jobs[] | select(.state == \"running\")] | length') -ge 1 ]]"
pid=$(cat "$state/coordinator.pid")
kill -9 "$pid"
wait_until 10 "the coordinator is gone" gone "$pid"
touch "$gate" # the jobs end while the coordinator is down
start_cq
cq wait "${jobs[@]}" || fail "cq wait of three succeeding jobs exited $?"
rc=0
cq wait "${jobs[0]}" "$bad" >"$work/wait.out" 2>&1 || rc=$?
[[ $rc == 5 ]] || fail "cq wait with a failed job exited $rc: $(cat "$work/wait.out")"
rc=0
cq wait "${jobs[0]}" "$bad" --json >"$work/wait.json" || rc=$?
[[ $rc == 5 ]] || fail "cq wait --json with a failed job exited $rc"
jq -e --arg ok "${jobs[0]}" --arg bad "$bad" \
  '(.jobs | map(.state)) == ["succeeded", "failed"] and .jobs[0].id == $ok and
   .jobs[1].id == $bad and .error.code == "invalid_state"' "$work/wait.json" >/dev/null ||
  fail "cq wait --json with a failed job printed $(cat "$work/wait.json")"
pass "cq wait exits 0 when all succeeded, 5 when one failed (--json: every job, and the error)"

# Gapless seqs per job, ending in the terminal event, in the store.
for j in "${jobs[@]}" "$bad"; do
  seqs=$(cq events "$j" --json | jq -s -c 'map(.seq)')
  n=$(jq length <<<"$seqs")
  [[ $seqs == "$(jq -c -n "[range(1; $n + 1)]")" ]] || fail "job $j has seqs $seqs"
  last=$(cq events "$j" --json | jq -s -r 'last.kind')
  [[ $last == succeeded || ($j == "$bad" && $last == failed) ]] || fail "job $j ends with $last"
done
pass "every job's events are gapless from 1 to its terminal event across the kill -9"

# The follower saw every event once, across the restart.
wait_until 20 "the follower saw the last event" bash -c \
  "jq -s -e --arg b $bad 'any(.job == \$b and .kind == \"failed\")' $follow >/dev/null"
kill "$follower" 2>/dev/null || true
dups=$(jq -s -r 'group_by(.job + " " + (.seq | tostring)) | map(select(length > 1)) | length' "$follow")
[[ $dups == 0 ]] || fail "the follower printed $dups events twice"
for j in "${jobs[@]}" "$bad"; do
  seen=$(jq -s -c --arg j "$j" 'map(select(.job == $j) | .seq)' "$follow")
  n=$(jq length <<<"$seen")
  [[ $seen == "$(jq -c -n "[range(1; $n + 1)]")" ]] || fail "the follower saw $seen of job $j"
  [[ $n == $(cq events "$j" --json | jq -s length) ]] || fail "the follower missed events of $j"
done
pass "cq events --follow resumed after the restart: every event once, in order ($(wc -l <"$follow") events)"

# Bad input: an unknown job, and --since on a job.
out=$(cq events nosuchjob 2>&1) && fail "cq events of an unknown job succeeded"
grep -q "no job" <<<"$out" || fail "unclear error: $out"
[[ $(cq events "${jobs[0]}" --since 2 --json | jq -s -r 'first.seq') == 3 ]] || fail "--since 2 does not start at 3"
pass "cq events refuses an unknown job; --since skips what was seen"

# A follow of every job starts from now: the history above is not printed
# again (--since 0 prints it first).
gate2=$work/gate2
late=$(cq submit -q --name late -- sh -c "while [ ! -f $gate2 ]; do sleep 0.05; done")
cq events -f --json >"$work/late.jsonl" 2>"$work/late.err" &
late_follower=$!
trap 'kill $follower $late_follower 2>/dev/null || true; cleanup' EXIT
wait_until 30 "job late runs" job_state_is "$late" running
touch "$gate2"
wait_until 30 "the follow from now sees late's end" \
  grep -q "\"job\":\"$late\",.*\"kind\":\"succeeded\"" "$work/late.jsonl"
[[ $(jq -r .job "$work/late.jsonl" | sort -u) == "$late" ]] ||
  fail "a follow from now printed other jobs' events: $(jq -r .job "$work/late.jsonl" | sort -u)"
kill "$late_follower"
[[ $(cq events --since 0 --json | wc -l) -gt $(wc -l <"$work/late.jsonl") ]] || fail "--since 0 printed no history"
pass "cq events -f of every job starts from now"

# cq events -f of named jobs ends once each has said its end, as cq logs -f
# does (it never ended); an OOM that is retried says requeued, not failed.
quick=$(cq submit -q -- sh -c 'sleep 1')
ended=$(cq submit -q -- true)
cq wait "$ended" >/dev/null
timeout 60 cq events -f "$quick" "$ended" >"$work/named.out" ||
  fail "cq events -f of two jobs exited $? (124: it did not end with them): $(cat "$work/named.out")"
grep -q "${quick:0:8} .*succeeded" "$work/named.out" || fail "no end of $quick: $(cat "$work/named.out")"
grep -q "${ended:0:8} .*succeeded" "$work/named.out" || fail "no end of $ended: $(cat "$work/named.out")"
retried=$(cq submit -q --name retried --ram 16M --retry-oom 1 -- sh -c 'cat /dev/zero | tail -c 100000000')
timeout 60 cq events -f --json "$retried" >"$work/retried.jsonl" || fail "cq events -f of the retried job exited $?"
kinds=$(jq -r .kind "$work/retried.jsonl" | tr '\n' ' ')
[[ $(jq -r 'select(.kind == "failed") | .kind' "$work/retried.jsonl" | wc -l) == 1 ]] ||
  fail "the retried job's events: $kinds"
jq -r 'select(.kind == "requeued") | .detail' "$work/retried.jsonl" | grep -q "oom at a cap of 16.0 MiB; retry 1 of 1 with 24.0 MiB" ||
  fail "the requeued event does not say the cap in MiB: $(jq -c 'select(.kind == "requeued")' "$work/retried.jsonl")"
pass "cq events -f of named jobs ends with them; a retried OOM is requeued once, failed once at the end ($kinds)"
