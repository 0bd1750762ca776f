#!/usr/bin/env bash
# Issue 21, acceptance 2: `promtool check metrics` passes on the coordinator's
# /metrics (cq-coordinator --http), and the counters move as jobs run: jobs
# submitted, outcomes by kind, allocation starts and cleanups, queue waits and
# run times, store commits; the gauges describe the node that runs them.
source "$(dirname "$0")/lib.sh"
command -v promtool >/dev/null || { echo "skip: no promtool (deploy/install-deps.sh installs prometheus)"; exit 77; }
hp=$(free_port)
start_coordinator "$CQ_URL" --http "127.0.0.1:$hp"
join_node m1 --mem-total 8589934592 --mem-available 8589934592 --cpus 4
base=http://127.0.0.1:$hp

check() {
  http_get "$base/metrics" >"$work/metrics.txt"
  promtool check metrics <"$work/metrics.txt" >"$work/promtool.txt" 2>&1 ||
    fail "promtool check metrics: $(cat "$work/promtool.txt")"
}
# metric NAME{LABELS}: its value (0 when absent).
metric() { awk -v k="$1" '$1 == k {print $2; found=1} END {if (!found) print 0}' "$work/metrics.txt"; }

wait_until 10 "the snapshot has m1 up" bash -c "curl -s $base/metrics | grep -qx 'cq_node_up{node=\"m1\"} 1'"
check
pass "promtool accepts /metrics of a fresh coordinator"
[[ $(http_code "$base/metrics" -H 'Host: rebound.example') == 403 ]] ||
  fail "a loopback server answered a request addressed to another name"
[[ $(http_code "http://localhost:$hp/metrics") == 200 ]] || fail "localhost is refused"
pass "served without a token, only to requests addressed to a loopback name (DNS rebinding)"
[[ $(metric cq_jobs_submitted_total) == 0 ]] || fail "submitted before any submit: $(metric cq_jobs_submitted_total)"
[[ $(metric 'cq_node_memory_total_bytes{node="m1"}') == 8589934592 ]] ||
  fail "m1's memory: $(grep cq_node_memory_total "$work/metrics.txt")"

gate=$work/gate
a=$(cq submit --name ok1 -- true)
b=$(cq submit --name ok2 -- true)
c=$(cq submit --name bad -- sh -c 'exit 3')
d=$(cq submit --name waits -- sh -c "until [ -f $gate ]; do sleep 0.1; done")
for j in "$a" "$b" "$c"; do wait_until 30 "job $j ends" bash -c "cq show $j --json | jq -e '.job.state == \"succeeded\" or .job.state == \"failed\"'"; done
wait_until 30 "job $d runs" job_state_is "$d" running
wait_until 10 "the snapshot counts the running job" bash -c \
  "curl -s $base/metrics | grep -qx 'cq_jobs{state=\"running\",priority=\"medium\"} 1'"
check
[[ $(metric cq_jobs_submitted_total) == 4 ]] || fail "submitted: $(metric cq_jobs_submitted_total), not 4"
[[ $(metric 'cq_job_outcomes_total{outcome="succeeded"}') == 2 ]] ||
  fail "succeeded: $(grep cq_job_outcomes_total "$work/metrics.txt")"
[[ $(metric 'cq_job_outcomes_total{outcome="exit_code"}') == 1 ]] ||
  fail "exit_code: $(grep cq_job_outcomes_total "$work/metrics.txt")"
(($(metric cq_allocation_starts_total) >= 4)) || fail "allocation starts: $(metric cq_allocation_starts_total)"
(($(metric cq_job_queue_wait_seconds_count) >= 4)) || fail "queue waits: $(metric cq_job_queue_wait_seconds_count)"
[[ $(metric cq_job_run_seconds_count) == 3 ]] || fail "run times: $(metric cq_job_run_seconds_count)"
(($(metric cq_store_commit_seconds_count) > 0)) || fail "no store commit was timed"
pass "the counters moved: 4 submitted, 2 succeeded, 1 exit_code, $(metric cq_allocation_starts_total) starts"

touch "$gate"
wait_until 30 "job $d succeeds" job_state_is "$d" succeeded
wait_until 30 "four cleanups are counted" bash -c \
  "curl -s $base/metrics | grep -qx 'cq_allocation_cleanups_total 4'"
wait_until 10 "the snapshot has no live job" bash -c "! curl -s $base/metrics | grep -q '^cq_jobs{'"
check
[[ $(metric 'cq_job_outcomes_total{outcome="succeeded"}') == 3 ]] || fail "succeeded after the gate: $(metric 'cq_job_outcomes_total{outcome="succeeded"}')"
(($(metric 'cq_http_requests_total{path="/metrics",code="200"}') >= 3)) || fail "requests are not counted"
pass "cleanups and outcomes follow the last job; promtool still accepts the page"
