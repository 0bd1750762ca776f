#!/usr/bin/env bash
# Issue 19, acceptance 4: a submit that no node could ever run is refused
# (exit 2) naming each node's reason, and queues nothing; --hold-for-node
# queues it anyway. With the coordinator stopped, `cq ls` fails at once on
# loopback: the refused connect is seen (the mechanism is asserted; the time
# it took is printed, not asserted).
source "$(dirname "$0")/lib.sh"
start_cq
wait_until 20 "the node reports its capacity" bash -c \
  "cq node ls --json | jq -e '.nodes[0].mem_total_bytes > 0'"
node=$(cq node ls --json | jq -r '.nodes[0].name')
before=$(cq ls --all --json | jq '.jobs | length')

refused() { # refused PATTERN SUBMIT-ARGS...: exit 2, PATTERN in the message
  local pattern=$1 out rc
  shift
  set +e
  out=$(cq submit "$@" -- true 2>&1)
  rc=$?
  set -e
  [[ $rc == 2 ]] || fail "cq submit $*: exit $rc, not 2: $out"
  [[ $out == *"no node can ever run this job"* && $out == *"$pattern"* ]] ||
    fail "cq submit $*: the refusal does not say '$pattern': $out"
  pass "cq submit $*: $out"
}
refused "$node: needs 1 GPU, the node has 0" --gpus 1
refused "$node: needs 1024.0 GiB RAM, the node has" --ram 1T
refused "$node: needs 1000 CPUs, the node has" --cpus 1000
[[ $(cq ls --all --json | jq '.jobs | length') == "$before" ]] || fail "a refused submit queued a job"
pass "nothing was queued by the refusals"

held=$(cq submit --hold-for-node --gpus 1 -- true)
[[ $(job_field "$held" state) == queued ]] || fail "--hold-for-node: the job is $(job_field "$held" state)"
pass "--hold-for-node queued it anyway ($(cq show "$held" --json | jq -r '.waiting[0]'))"

# The coordinator stops: a refused connect, reported at once.
kill "$(cat "$state/coordinator.pid")"
wait_until 10 "the coordinator is gone" gone "$(cat "$state/coordinator.pid")"
t0=$(date +%s%N)
set +e
out=$(cq ls 2>&1)
rc=$?
set -e
t1=$(date +%s%N)
[[ $rc == 1 && $out == *"cannot reach the coordinator at $CQ_URL: Connection refused"* ]] ||
  fail "cq ls with the coordinator stopped: exit $rc: $out"
pass "cq ls with no coordinator: exit 1 in $(((t1 - t0) / 1000000)) ms (not asserted): $out"
