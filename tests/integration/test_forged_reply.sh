#!/usr/bin/env bash
# Issue 7 item 8: only the node an order went to can answer it. A process with
# no token floods the coordinator with replies to every small order id while
# `cq logs` reads a job's output through its node: the forged text must never
# be printed (answers are accepted only from the connection the order went
# to, and order ids cannot be guessed).
source "$(dirname "$0")/lib.sh"
start_cq
job=$(cq submit -- sh -c 'echo real output')
wait_until 30 "job $job succeeds" job_state_is "$job" succeeded
cq-test-load forge-replies "$CQ_URL" 8 2000 >"$work/forged" &
forger=$!
for i in $(seq 1 40); do
  out=$(cq logs "$job")
  [[ $out == "real output" ]] || fail "cq logs printed '$out' (a forged reply was accepted)"
done
wait "$forger"
(($(cat "$work/forged") > 0)) || fail "the forger sent nothing"
pass "40 log reads while $(cat "$work/forged") forged replies arrived: only the node's answers were accepted"
