#!/usr/bin/env bash
# Issue 7 items 5 and 12: every order fits the frame limit by construction.
# A job spec has a documented size limit (1 MiB encoded) that leaves room for
# its start order; a spec over it is refused at submit with a clear error,
# nothing is stored, the node stays connected, and hostile submits do not
# inflate the coordinator (environments are not kept in memory).
source "$(dirname "$0")/lib.sh"
start_cq
tok=$(owner_token)
coord_pid=$(cat "$state/coordinator.pid")

# The CLI says which part is too large before sending anything.
for i in $(seq 1 12); do export "CQ_TEST_BIG_$i=$(head -c 100000 /dev/zero | tr '\0' x)"; done
set +e
out=$(cq submit -- true 2>&1)
rc=$?
set -e
[[ $rc == 2 && $out == *too_large*"over the limit of 1048576 bytes"*environment*--env-clear* ]] ||
  fail "an oversized spec from the CLI: rc $rc, '$out'"
for i in $(seq 1 12); do unset "CQ_TEST_BIG_$i"; done
pass "the CLI refuses a spec over 1 MiB, naming the environment and --env-clear"

# Raw submits the CLI would not send: just under the frame limit (its start
# order would have been larger than the frame limit), and 4 MiB ones.
[[ $(cq-test-load submit-big "$CQ_URL" "$tok" 1 8000000) == too_large ]] ||
  fail "a 8 MB spec was not refused as too_large"
big=$(cq-test-load submit-big "$CQ_URL" "$tok" 50 4194304 | sort | uniq -c)
[[ $big == *"50 too_large"* ]] || fail "50 submits of 4 MiB environments: $big"
[[ $(cq ls --all --json | jq '.jobs | length') == 0 ]] || fail "a refused spec was stored"
pass "specs over the limit are refused as too_large and store nothing"

# 50 maximal accepted specs (an environment just under the limit each).
ok=$(cq-test-load submit-big "$CQ_URL" "$tok" 50 1040000 | sort | uniq -c)
[[ $ok == *"50 ok"* ]] || fail "50 maximal submits: $ok"
rss=$(rss_kb "$coord_pid")
echo "coordinator RSS after 50 refused 4 MiB and 50 accepted maximal submits: $((rss / 1024)) MiB"
# (A sanitizer build's memory is not the product's: the figure is only shown.)
if ! ldd "$(command -v cq-coordinator)" | grep -q libasan; then
  ((rss < 150 * 1024)) || fail "the coordinator grew to $((rss / 1024)) MiB"
fi
pass "the coordinator stays at $((rss / 1024)) MiB RSS after 100 hostile submits"

# The node is still connected and runs work.
job=$(cq submit --env-clear --env GREETING=hi -- sh -c 'echo "$GREETING ${HOME-unset}"')
wait_until 30 "job $job succeeds" job_state_is "$job" succeeded
[[ $(cq logs "$job") == "hi unset" ]] || fail "--env-clear/--env: the job printed '$(cq logs "$job")'"
pass "the node stays connected and runs jobs; --env-clear and --env set the environment exactly"
