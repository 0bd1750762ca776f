#!/usr/bin/env bash
# Acceptance 3: cq up; jobs succeed, fail with their exit code, print their
# logs; cancel kills the whole process group; a garbage frame gets an error
# and the coordinator keeps serving.
source "$(dirname "$0")/lib.sh"
start_cq
[[ -f $CQ_CONFIG_DIR/token ]] || fail "cq up wrote no token"
[[ $(stat -c %a "$CQ_CONFIG_DIR/token") == 600 ]] || fail "token file is not mode 0600"
cq node ls --json | jq -e '.nodes[0].online == true and .nodes[0].state == "approved"' >/dev/null ||
  fail "the node is not online and approved"
pass "cq up started an approved node"

job=$(cq submit -- sh -c 'echo hello')
wait_until 30 "job $job succeeds" job_state_is "$job" succeeded
[[ $(job_field "$job" exit_code) == 0 ]] || fail "exit code of a succeeded job is not 0"
[[ $(cq logs "$job") == hello ]] || fail "cq logs printed '$(cq logs "$job")', not hello"
pass "sh -c 'echo hello' succeeded and cq logs printed hello"

bad=$(cq submit -- sh -c 'exit 3')
wait_until 30 "job $bad fails" job_state_is "$bad" failed
[[ $(job_field "$bad" exit_code) == 3 ]] || fail "exit code is $(job_field "$bad" exit_code), not 3"
[[ $(job_field "$bad" reason) == exit_code ]] || fail "reason is not exit_code"
pass "a job exiting 3 is failed with exit code 3"

marker=$((900000 + RANDOM))
long=$(cq submit -- sh -c "sleep $marker & sleep $marker; wait")
wait_until 30 "job $long runs" job_state_is "$long" running
wait_until 10 "both sleeps run" bash -c "[[ \$(pgrep -fc 'slee[p] $marker') -ge 2 ]]"
cq cancel "$long" >/dev/null
wait_until 30 "job $long is cancelled" job_state_is "$long" cancelled
wait_until 15 "no process of the cancelled job survives" bash -c "! pgrep -f 'slee[p] $marker'"
pass "cq cancel killed the whole process group"

set +e
out=$(cq cancel "$long" 2>&1)
rc=$?
set -e
[[ $rc -eq 5 ]] || fail "cancelling a cancelled job exited $rc ($out), not 5"
set +e
cq show 00000000-0000-0000-0000-000000000000 >/dev/null 2>&1
rc=$?
set -e
[[ $rc -eq 3 ]] || fail "show of an unknown job exited $rc, not 3"
pass "conflicts and unknown jobs give exit codes 5 and 3"

reply=$(cq-test-raw "$CQ_URL" c1ff00)
[[ $reply == "error malformed"* ]] || fail "garbage frame got '$reply'"
reply=$(cq-test-raw "$CQ_URL" dd08000000)
[[ $reply == error* ]] || fail "array bomb got '$reply'"
cq ls >/dev/null || fail "cq ls failed after garbage frames"
[[ $(cq ls --all --json | jq '.jobs | length') == 3 ]] || fail "cq ls --all does not list 3 jobs"
pass "garbage frames got errors and cq ls still works"
