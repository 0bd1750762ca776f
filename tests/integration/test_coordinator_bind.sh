#!/usr/bin/env bash
# Issue 7 item 20: --bind takes the compute-queue seed's HOST:PORT form as well
# as tcp://HOST:PORT; a non-loopback address is refused with the real reason
# (it needs CurveZMQ, which this version does not have yet).
source "$(dirname "$0")/lib.sh"
start_coordinator "127.0.0.1:$port"
pass "--bind 127.0.0.1:$port (HOST:PORT) serves"
kill "$(cat "$state/coordinator.pid")"
wait_until 10 "the coordinator stops" gone "$(cat "$state/coordinator.pid")"
set +e
out=$(cq-coordinator --state "$state/coordinator" --bind 10.0.0.1:7800 2>&1)
rc=$?
set -e
[[ $rc == 2 && $out == *CurveZMQ* && $out != *"only loopback endpoints are allowed"* ]] ||
  fail "a non-loopback bind: rc $rc: $out"
pass "a non-loopback bind is refused naming the reason (exit 2)"
