#!/usr/bin/env bash
# Acceptance 4: kill -9 of the coordinator while a job runs loses nothing; the
# running job's exit is recorded after the restart, a queued one still runs.
source "$(dirname "$0")/lib.sh"
start_cq
running=$(cq submit -- sh -c 'sleep 5; echo finished')
wait_until 30 "job $running runs" job_state_is "$running" running
queued=$(cq submit -- sh -c 'echo second')
pid=$(cat "$state/coordinator.pid")
kill -9 "$pid"
wait_until 10 "the coordinator is gone" gone "$pid"
start_cq
[[ $(cat "$state/coordinator.pid") != "$pid" ]] || fail "the coordinator was not restarted"
cq ls --all --json | jq -e --arg a "$running" '.jobs | map(.id) | index($a) != null' >/dev/null ||
  fail "the running job is not listed after the restart"
state_q=$(job_field "$queued" state)
[[ $state_q =~ ^(queued|starting|running|succeeded)$ ]] || fail "the queued job is '$state_q'"
wait_until 60 "job $running succeeds" job_state_is "$running" succeeded
[[ $(job_field "$running" exit_code) == 0 ]] || fail "the exit code was not recorded"
[[ $(cq logs "$running") == finished ]] || fail "its log is '$(cq logs "$running")'"
pass "the job running during kill -9 ended succeeded with its exit recorded"
wait_until 60 "job $queued succeeds" job_state_is "$queued" succeeded
pass "the job submitted before the kill ran after the restart"
