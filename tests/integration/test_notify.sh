#!/usr/bin/env bash
# Issue 21, acceptance 3: notifications read the committed event stream from a
# durable cursor.
#  - a local HTTP receiver gets every matching event at least once, and so
#    exactly one (job, seq) per event after deduplication, across a kill -9 of
#    the coordinator in the middle of a burst of 200 jobs;
#  - a failing receiver is retried until it recovers, and meanwhile jobs keep
#    being placed and finishing; each failure is logged and counted in /metrics;
#  - a per_job rule tells only of jobs submitted with `cq submit --notify`,
#    through a command that reads the event as JSON on its stdin.
source "$(dirname "$0")/lib.sh"
helpers=()
trap 'kill "${helpers[@]}" 2>/dev/null || true; cleanup' EXIT
log=$work/received.jsonl
flag=$work/receiver-down
python3 "$here/../tools/webhook_receiver.py" "$work/rport" "$log" "$flag" &
helpers+=($!)
wait_until 10 "the receiver listens" test -s "$work/rport"
rport=$(cat "$work/rport")
cat >"$work/coordinator.toml" <<TOML
[[notify]]
name = "ends"
on = ["succeeded", "failed"]
webhook = "http://127.0.0.1:$rport/hook"
[[notify]]
name = "mine"
on = ["succeeded"]
per_job = true
command = ["/bin/sh", "-c", "cat >>$work/mine.jsonl; echo >>$work/mine.jsonl", "{job}"]
TOML
hp=$(free_port)
start_coordinator "$CQ_URL" --config "$work/coordinator.toml" --http "127.0.0.1:$hp"
join_node n1 --mem-total 68719476736 --mem-available 68719476736 --cpus 16

# ---- a burst of 200 jobs, and a kill -9 in its middle ----------------------------------
n=$(cq-test-load submit-burst "$CQ_URL" "$(owner_token)" 200 "$work/ran")
[[ $n == 200 ]] || fail "the burst: $n of 200 submits acknowledged"
wait_until 60 "some deliveries arrive" bash -c "[[ -s $log && \$(wc -l <$log) -ge 20 ]]"
cpid=$(cat "$state/coordinator.pid")
kill -9 "$cpid"
wait_until 10 "the coordinator is gone" gone "$cpid"
before=$(wc -l <"$log")
cq-coordinator --state "$state/coordinator" --bind "$CQ_URL" --config "$work/coordinator.toml" \
  --http "127.0.0.1:$hp" >>"$state/coordinator.log" 2>&1 &
echo $! >"$state/coordinator.pid"
wait_until 10 "the coordinator answers again" cq node ls
ended() { [[ $(cq ls --all --json | jq '[.jobs[] | select(.state == "succeeded")] | length') == 200 ]]; }
wait_until 90 "all 200 jobs succeed" ended
ends() { jq -r 'select(.kind == "succeeded" or .kind == "failed") | "\(.job) \(.seq)"' "$log" | sort -u | wc -l; }
wait_until 60 "every job's end is delivered" bash -c "[[ \$(jq -r 'select(.kind == \"succeeded\") | .job' $log | sort -u | wc -l) == 200 ]]"
[[ $(ends) == 200 ]] || fail "$(ends) distinct (job, seq) ends received, not 200"
total=$(wc -l <"$log")
pass "200 ends delivered across a kill -9 ($before before it; $total deliveries, $((total - 200)) repeated)"

# ---- a receiver that is down --------------------------------------------------------------
touch "$flag"
down=()
for i in 1 2 3 4 5; do down+=("$(cq submit --name "while-down-$i" -- true)"); done
for j in "${down[@]}"; do wait_until 30 "job $j succeeds while the receiver is down" job_state_is "$j" succeeded; done
wait_until 30 "failures are counted" bash -c \
  "curl -s http://127.0.0.1:$hp/metrics | grep -qE '^cq_notify_failures_total\{rule=\"ends\"\} [1-9]'"
grep -q "notify ends: succeeded of .* not delivered: the receiver answered HTTP 500" "$state/coordinator.log" ||
  fail "no failure logged"
pass "with the receiver down, the 5 jobs ran and finished; the failures are logged and counted"
rm -f "$flag"
for j in "${down[@]}"; do
  wait_until 90 "job $j's end arrives after the receiver is back" grep -q "\"job\":\"$j\"" "$log"
done
pass "the receiver got them once it recovered"

# ---- a per-job rule with a command --------------------------------------------------------
quiet=$(cq submit --name quiet -- true)
wait_until 30 "job $quiet succeeds" job_state_is "$quiet" succeeded
tell=$(cq submit --notify --name tellme -- true)
wait_until 30 "job $tell succeeds" job_state_is "$tell" succeeded
wait_until 30 "the command tells of $tell" grep -q "\"job\":\"$tell\"" "$work/mine.jsonl"
jq -e --arg j "$tell" 'select(.job == $j) | .kind == "succeeded" and .name == "tellme" and .owner == "tester"' \
  "$work/mine.jsonl" >/dev/null || fail "the command's event: $(cat "$work/mine.jsonl")"
grep -q "$quiet" "$work/mine.jsonl" && fail "job $quiet (no --notify) was told of"
[[ $(grep -c . "$work/mine.jsonl") == 1 ]] || fail "the per-job rule told of more: $(cat "$work/mine.jsonl")"
pass "the per-job rule told of the --notify job only, with the event on the command's stdin"
