#!/usr/bin/env bash
# This machine's clients reach the coordinator through its Unix socket
# (--local-socket, docs/adr/0032): cq up serves one and writes
# <config>/local; cq prefers it to TCP while it accepts, and falls back to
# the configured endpoint when it does not. A bad --local-socket is refused
# naming the flag, and a file that is not a socket is never replaced.
source "$(dirname "$0")/lib.sh"
sock=$state/coordinator/cq.sock

# cq up serves the socket and says where in <config>/local.
start_cq
[[ -S $sock ]] || fail "cq up's coordinator serves no socket at $sock"
[[ $(stat -c %a "$sock") == 666 ]] || fail "the socket is mode $(stat -c %a "$sock"), not 666"
[[ $(sed -n 1p "$CQ_CONFIG_DIR/local") == "unix://$sock" &&
  $(sed -n 2p "$CQ_CONFIG_DIR/local") == "$CQ_URL" ]] ||
  fail "<config>/local: $(cat "$CQ_CONFIG_DIR/local")"
pass "cq up serves $sock (0666) and writes it to <config>/local"
cq down >/dev/null

# Only the socket works: the configured endpoint is a port where nothing
# listens, and <config>/local names the socket for that endpoint.
cq-coordinator --state "$state/coordinator" --bind "$CQ_URL" --local-socket "$sock" \
  >>"$state/coordinator.log" 2>&1 &
echo $! >"$state/coordinator.pid"
wait_until 10 "the coordinator answers" cq whoami
# Port 1: no test listens there, whereas a free port picked now may be taken
# by a test running beside this one before the refusals below are checked.
dead=tcp://127.0.0.1:1
unset CQ_URL
echo "$dead" >"$CQ_CONFIG_DIR/url"
printf 'unix://%s\n%s\n' "$sock" "$dead" >"$CQ_CONFIG_DIR/local"
id=$(cq submit --hold-for-node -- true)
[[ $(cq show "$id" --json | jq -r .job.state) == queued ]] || fail "submit over the socket"
pass "cq submits and shows through the Unix socket"

# <config>/local for another endpoint is ignored: cq uses the URL (refused).
printf 'ipc://%s\n%s\n' "$sock" "tcp://127.0.0.1:2" >"$CQ_CONFIG_DIR/local"
CQ_TIMEOUT_MS=5000 EXPECT_RC=1 expect_refused \
  "cannot reach the coordinator at $dead: Connection refused" whoami
pass "a <config>/local written for another endpoint is not used"

# A coordinator killed with -9 leaves its socket file: cq falls back to the
# URL and says at once that nothing listens there.
printf 'ipc://%s\n%s\n' "$sock" "$dead" >"$CQ_CONFIG_DIR/local"
kill -9 "$(cat "$state/coordinator.pid")"
wait_until 10 "the coordinator is gone" gone "$(cat "$state/coordinator.pid")"
[[ -S $sock ]] || fail "expected the dead coordinator's socket file to stay"
CQ_TIMEOUT_MS=5000 EXPECT_RC=1 expect_refused \
  "cannot reach the coordinator at $dead: Connection refused" whoami
pass "a stale socket file is not waited on: cq falls back to the URL (refused, exit 1)"

# The next start replaces the stale socket.
cq-coordinator --state "$state/coordinator" --bind "tcp://127.0.0.1:$(free_port)" \
  --local-socket "$sock" >>"$state/coordinator.log" 2>&1 &
echo $! >"$state/coordinator.pid"
wait_until 10 "the restarted coordinator answers on the socket" cq whoami
pass "a restarted coordinator replaces its stale socket"

echo precious >"$work/file"

# cq login --local-socket: on the coordinator's machine, the service's way.
rm "$CQ_CONFIG_DIR/local"
cq login "$dead" "$(owner_token)" --local-socket "$sock" >/dev/null ||
  fail "cq login --local-socket (only the socket answers)"
[[ $(sed -n 1p "$CQ_CONFIG_DIR/local") == "unix://$sock" ]] || fail "login wrote no <config>/local"
cq whoami >/dev/null || fail "whoami after login --local-socket"
set +e
out=$(cq login "$dead" "$(owner_token)" --local-socket "$work/file" 2>&1)
rc=$?
set -e
[[ $rc == 2 && $out == *"--local-socket"* && $out == *"not a Unix socket"* ]] ||
  fail "cq login --local-socket FILE: rc $rc: $out"
pass "cq login --local-socket writes <config>/local and checks the login through it"
kill "$(cat "$state/coordinator.pid")"
wait_until 10 "the coordinator stops" gone "$(cat "$state/coordinator.pid")"

# Bad paths are refused, naming the flag; a regular file is left alone.
set +e
out=$(cq-coordinator --state "$state/coordinator" --local-socket relative.sock 2>&1)
rc=$?
set -e
[[ $rc == 2 && $out == *"--local-socket"* && $out == *absolute* ]] ||
  fail "a relative --local-socket: rc $rc: $out"
set +e
out=$(cq-coordinator --state "$state/coordinator" --bind "tcp://127.0.0.1:$(free_port)" \
  --local-socket "$work/file" 2>&1)
rc=$?
set -e
[[ $rc != 0 && $out == *"not a socket"* && $(cat "$work/file") == precious ]] ||
  fail "--local-socket on a regular file: rc $rc: $out"
pass "--local-socket refuses a relative path (exit 2) and never replaces a file that is not a socket"
