#!/usr/bin/env bash
# Issue 7 item 7: an exit is never lost and a job never stays running for good
# (SPEC section 10).
#  (a) A node killed between recording an exit (exit.json) and queueing its
#      report still reports it when it starts again.
#  (b) The coordinator reconciles: an allocation it believes live that the
#      node's heartbeats stop listing becomes lost and its job is requeued.
#  (c) On a full disk the workload is not launched: its allocation record
#      cannot be made durable, so the job fails launch_failed, saying why
#      (needs root for a small tmpfs; skipped otherwise).
source "$(dirname "$0")/lib.sh"
start_cq
node_dir=$state/node

# (a) The job ends while cq-node is down; we then leave exactly what a crash
# between exit.json and the outbox entry leaves: exit.json, no report.
gate=$work/gate-a
a=$(cq submit -- sh -c "while [ ! -e $gate ]; do sleep 0.05; done; echo done")
wait_until 30 "job $a runs" job_state_is "$a" running
alloc=$(job_field "$a" allocation)
kill_node
touch "$gate"
wait_until 10 "the workload ended (cq-shim wrote its status)" test -s "$node_dir/allocations/$alloc/status"
cat >"$node_dir/allocations/$alloc/exit.json" <<JSON
{"allocation": "$alloc", "job": "$a", "attempt": 1, "exit_code": 0, "signal": null,
 "reason": "", "wall_ms": 100, "peak_ram_bytes": null, "peak_vram_bytes": null,
 "finished_ms": 0}
JSON
start_cq
wait_until 30 "job $a succeeds" job_state_is "$a" succeeded
pass "an exit recorded just before a crash (exit.json, no report queued) is reported after the restart"

# (b) The node loses track of a running allocation (its state is gone).
# A sleep of a length only this run uses: the pkill below must not reach
# another test's workload (ctest -j2 runs this test's platform variants side
# by side; a shared "sleep 600" let one kill the other's first attempt).
nap=$((600 + $$ % 100000))
b=$(cq submit -- sh -c "if [ \"\$CQ_ATTEMPT\" = 1 ]; then exec sleep $nap; fi; echo \"attempt \$CQ_ATTEMPT\"")
wait_until 30 "job $b runs" job_state_is "$b" running
balloc=$(job_field "$b" allocation)
kill_node
pkill -9 -f "^sleep $nap\$" || true
pkill -9 -f "cq-shim .*/$balloc/status" || true
rm -rf "${node_dir:?}/allocations/$balloc"
start_cq
wait_until 30 "job $b succeeds on a second attempt" job_state_is "$b" succeeded
[[ $(cq show "$b" --json | jq -r '.allocations[0].reason') == lost ]] ||
  fail "the vanished allocation ended '$(cq show "$b" --json | jq -r '.allocations[0].reason')', not lost"
[[ $(cq logs "$b") == "attempt 2" ]] || fail "the requeued attempt printed '$(cq logs "$b")'"
pass "an allocation the node's heartbeats stop listing becomes lost and its job is requeued"

# (c) A full disk.
if [[ $(id -u) != 0 ]]; then
  echo "skip: full-disk part (needs root for a tmpfs)"
  exit 77
fi
small=$work/small
mkdir -p "$small"
mount -t tmpfs -o size=2m tmpfs "$small"
trap 'kill $(cat "$state/full.pid" 2>/dev/null) 2>/dev/null; umount -l "$small" 2>/dev/null; cleanup' EXIT
code=$(cq node invite full)
cq-node --join "$CQ_URL" "$code" full --state "$small/node" >"$state/full.log" 2>&1 &
echo $! >"$state/full.pid"
wait_until 10 "node full joins" bash -c "cq node ls --json | jq -e '.nodes[] | select(.name == \"full\")'"
cq node approve full >/dev/null
wait_until 10 "node full is online" bash -c \
  "cq node ls --json | jq -e '.nodes[] | select(.name == \"full\" and .online)'"
dd if=/dev/zero of="$small/fill" bs=4096 2>/dev/null || true
c=$(cq submit --node full -- sh -c "touch $work/c.ran")
wait_until 30 "job $c fails" job_state_is "$c" failed
[[ $(job_field "$c" reason) == launch_failed ]] || fail "job $c failed '$(job_field "$c" reason)'"
detail=$(cq show "$c" --json | jq -r '.allocations[0].detail')
[[ $detail == *"allocation record cannot be written"*"No space left on device"* ]] ||
  fail "the allocation's detail does not say why: '$detail'"
[[ ! -e $work/c.ran ]] || fail "the workload ran although its record could not be written"
pass "on a full disk the workload is not launched: launch_failed, '$detail'"
