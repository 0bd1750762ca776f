#!/usr/bin/env bash
# Issue 7 item 10: argv and the environment are bytes, as the kernel sees them
# (SPEC section 3). A variable that is not UTF-8 in the caller's shell, or such
# an argument, is carried to the job exactly; it never makes submit fail.
source "$(dirname "$0")/lib.sh"
start_cq
export CQ_TEST_LATIN=$'caf\xe9 \xff'
job=$(cq submit -- sh -c 'printf "%s|%s" "$CQ_TEST_LATIN" "$1"' arg0 $'\xfe\x80ok')
wait_until 30 "job $job succeeds" job_state_is "$job" succeeded
got=$(cq logs "$job" | od -An -tx1 | tr -d ' \n')
want=$(printf '%s|%s' $'caf\xe9 \xff' $'\xfe\x80ok' | od -An -tx1 | tr -d ' \n')
[[ $got == "$want" ]] || fail "the job saw $got, not $want"
pass "non-UTF-8 bytes in the environment and argv reach the job exactly"
# Reads work too: JSON output replaces what is not UTF-8, human output escapes it.
cq show "$job" --json | jq -e .job.argv >/dev/null || fail "cq show --json is not JSON"
cq ls --all >/dev/null || fail "cq ls failed"
# And it survives a coordinator restart (stored as bytes, not JSON text).
cpid=$(cat "$state/coordinator.pid")
kill -9 "$cpid"
wait_until 10 "the coordinator is gone" gone "$cpid"
rm -f "$state/coordinator.pid"
start_cq
again=$(cq submit -- true)
wait_until 30 "job $again succeeds" job_state_is "$again" succeeded
[[ $(job_field "$job" state) == succeeded ]] || fail "the job was not recovered"
pass "jobs with such bytes are recovered after a restart, and submits keep working"
