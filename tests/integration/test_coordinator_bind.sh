#!/usr/bin/env bash
# --bind takes the compute-queue seed's HOST:PORT form as well as
# tcp://HOST:PORT. Off loopback the coordinator always speaks CurveZMQ with
# the keypair of its state dir (SPEC section 6): a plain client gets no
# answer, a client with the server key does; without a usable keypair there
# is no non-loopback bind.
source "$(dirname "$0")/lib.sh"
start_coordinator "127.0.0.1:$port"
pass "--bind 127.0.0.1:$port (HOST:PORT) serves"
kill "$(cat "$state/coordinator.pid")"
wait_until 10 "the coordinator stops" gone "$(cat "$state/coordinator.pid")"

# A wildcard bind: every address of the machine, so CURVE.
cq-coordinator --state "$state/coordinator" --bind "0.0.0.0:$port" >>"$state/coordinator.log" 2>&1 &
echo $! >"$state/coordinator.pid"
key=$(cq-coordinator --state "$state/coordinator" --show-key)
[[ ${#key} == 40 ]] || fail "--show-key printed '$key'"
[[ $(stat -c %a "$state/coordinator/curve.key") == 600 ]] || fail "curve.key is not 0600"
CQ_SERVER_KEY=$key wait_until 10 "the coordinator answers over CURVE" cq node ls
pass "--bind 0.0.0.0:$port serves CurveZMQ clients that know the server key"
set +e
out=$(CQ_TIMEOUT_MS=1000 cq node ls 2>&1)
rc=$?
set -e
[[ $rc == 1 && $out == *unavailable* ]] || fail "a plain client off loopback: rc $rc: $out"
pass "a plain client gets no answer from a CURVE coordinator (exit 1)"
grep -qF "CurveZMQ, server key $key" "$state/coordinator.log" || fail "the log does not name the key"
kill "$(cat "$state/coordinator.pid")"
wait_until 10 "the coordinator stops" gone "$(cat "$state/coordinator.pid")"

# A keypair others can read is refused, and with it the non-loopback bind.
chmod 644 "$state/coordinator/curve.key"
set +e
out=$(cq-coordinator --state "$state/coordinator" --bind "0.0.0.0:$port" 2>&1)
rc=$?
set -e
[[ $rc == 2 && $out == *"open to group or others"* && $out == *CURVE* ]] ||
  fail "a 0644 keypair: rc $rc: $out"
pass "a keypair readable by others is refused, and no non-loopback bind happens (exit 2)"
