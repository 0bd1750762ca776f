#!/usr/bin/env bash
# cq links the C library statically (docs/adr/0052): what it asks the name
# service must still work. A coordinator named by host name (localhost, and
# this machine's name) answers, through the C library's built-in files and
# dns lookups, and cq names its user without HOME and USER (getpwuid).
source "$(dirname "$0")/lib.sh"

start_coordinator
port=${CQ_URL##*:}
id=$(CQ_URL="tcp://localhost:$port" cq submit --hold-for-node -- true)
[[ $(CQ_URL="tcp://localhost:$port" cq show "$id" --json | jq -r .job.state) == queued ]] ||
  fail "cq did not reach the coordinator as tcp://localhost:$port"
pass "cq reaches the coordinator as tcp://localhost:$port"

host=$(hostname)
if getent hosts "$host" >/dev/null; then
  CQ_URL="tcp://$host:$port" cq whoami >/dev/null ||
    fail "cq did not reach the coordinator as tcp://$host:$port"
  pass "cq reaches the coordinator by this machine's name ($host)"
else
  echo "note: $host does not resolve here; its lookup is not tested"
fi

# A name that resolves nowhere is refused with the name, at once: the call's
# timeout is ten minutes, and the command's deadline one (it used to wait the
# call's timeout out, as ZeroMQ retries a lookup quietly).
set +e
out=$(CQ_TIMEOUT_MS=600000 CQ_URL="tcp://no-such-host.invalid:$port" timeout 60 cq whoami 2>&1)
rc=$?
set -e
[[ $rc != 124 ]] || fail "an unresolvable coordinator name: cq waited out its deadline"
[[ $rc != 0 && $out == *"'no-such-host.invalid' does not resolve"* && $out == *CQ_URL* ]] ||
  fail "an unresolvable coordinator name: rc $rc: $out"
pass "an unresolvable coordinator name is refused at once, naming it and CQ_URL (exit $rc)"

# An IPv6 address without brackets is refused with the form it needs.
set +e
out=$(CQ_URL="tcp://::1:$port" timeout 60 cq whoami 2>&1)
rc=$?
set -e
[[ $rc != 0 && $rc != 124 && $out == *"tcp://[::1]:$port"* ]] ||
  fail "an IPv6 address without brackets: rc $rc: $out"
pass "an IPv6 address without brackets is refused, showing the bracketed form (exit $rc)"

# A name that resolves, where nothing listens: refused at once as well.
closed=$(free_port)
set +e
out=$(CQ_TIMEOUT_MS=600000 CQ_URL="tcp://localhost:$closed" timeout 60 cq whoami 2>&1)
rc=$?
set -e
[[ $rc != 124 && $rc != 0 && $out == *refused* ]] ||
  fail "a resolvable name with nothing listening: rc $rc: $out"
pass "a resolvable name with nothing listening is refused at once (exit $rc)"

# Without HOME and USER, cq finds its user in the password database.
me=$(id -un)
out=$(env -u USER -u HOME CQ_CONFIG_DIR="$CQ_CONFIG_DIR" CQ_URL="$CQ_URL" cq whoami)
[[ -n $out ]] || fail "cq whoami without HOME and USER printed nothing"
pass "cq runs without HOME and USER (user $me)"
