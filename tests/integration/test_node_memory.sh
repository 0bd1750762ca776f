#!/usr/bin/env bash
# Issue 4, acceptance 1: memory caps. A job allocating 512 MiB under a 128 MiB
# cap ends `oom` with a peak near the cap, while a job under its cap on the
# same node is unaffected; first with the mode the node detects (cgroup_v1 on
# the machines this is built on, as root), then with the watchdog forced by
# node.toml [memory] mode = "watchdog". How soon the cap is enforced is a
# duration: cq-bench measures it, no test asserts it (a loaded machine is slow).
source "$(dirname "$0")/lib.sh"
start_cq
node_dir=$state/node
mib=$((1024 * 1024))

# hog T0FILE: records the time it starts allocating, then holds 512 MiB (tail
# keeps the last 512 MiB of its input in memory until its input ends).
hog() {
  cq submit --ram 128M -- sh -c "date +%s%3N > $1; { head -c 536870912 /dev/zero; sleep 30; } | tail -c 536870912 >/dev/null"
}

check_mode() {
  local mode=$1
  cq node ls --json | jq -e --arg m "$mode" '.nodes[0].mem_cap_mode == $m' >/dev/null ||
    fail "node reports mem_cap_mode '$(cq node ls --json | jq -r '.nodes[0].mem_cap_mode')', not $mode"
  local t0=$work/t0-$mode
  local calm big
  calm=$(cq submit --ram 128M -- sh -c 'sleep 3; echo calm')
  big=$(hog "$t0")
  wait_until 30 "the hog ($mode) ends" bash -c "[[ \$(cq show $big --json | jq -r .job.state) == failed ]]"
  local reason alloc peak finished t_start
  reason=$(cq show "$big" --json | jq -r '.allocations[0].reason')
  [[ $reason == oom ]] || fail "$mode: the hog ended with reason '$reason', not oom"
  [[ $(job_field "$big" reason) == oom ]] || fail "$mode: job reason is '$(job_field "$big" reason)', not oom"
  alloc=$(cq show "$big" --json | jq -r '.allocations[0].id')
  peak=$(cq show "$big" --json | jq -r '.allocations[0].peak_ram_bytes')
  finished=$(jq -r .finished_ms "$node_dir/allocations/$alloc/exit.json")
  t_start=$(cat "$t0")
  ((peak >= 100 * mib)) || fail "$mode: peak $peak is far below the 128 MiB cap"
  if [[ $mode == cgroup_v1 ]]; then
    ((peak <= 128 * mib)) || fail "$mode: peak $peak is above the cap"
  else
    # The watchdog samples every 150 ms: it may overshoot, never past the hog's size.
    ((peak <= 540 * mib)) || fail "$mode: peak $peak is above what the hog allocates"
  fi
  pass "$mode: 512 MiB under a 128 MiB cap ended oom, peak $((peak / mib)) MiB (here $((finished - t_start)) ms after it began allocating; not asserted)"
  wait_until 30 "the calm job ($mode) succeeds" job_state_is "$calm" succeeded
  [[ $(cq logs "$calm") == calm ]] || fail "$mode: the job under its cap printed '$(cq logs "$calm")'"
  pass "$mode: a job under its cap on the same node succeeded"
  [[ ! -d $(jq -r .cgroup "$node_dir/allocations/$alloc/alloc.json") ]] ||
    [[ $(jq -r .cgroup "$node_dir/allocations/$alloc/alloc.json") == "" ]] ||
    fail "$mode: the allocation's cgroup was not removed"
}

if [[ $(node_platform) == posix ]]; then
  # No cgroups on the posix platform: the node detects the watchdog itself.
  check_mode watchdog
  pass "posix: the node detected the watchdog without being told"
elif [[ $(id -u) == 0 && -f /sys/fs/cgroup/memory/memory.limit_in_bytes ]]; then
  check_mode cgroup_v1
  cg=$(jq -r .cgroup "$node_dir"/allocations/*/alloc.json | grep -v '^$' | head -n 1)
  [[ $cg == /sys/fs/cgroup/memory/* && $cg != /sys/fs/cgroup/memory/cq-* ]] ||
    fail "the allocation group '$cg' is not below the node's own memory group"
  pass "allocation groups are created below the node's own group ($(dirname "$cg"))"
  # The peak a capped job reports is its memory group's, which the cap
  # counts: python's RSS also counts shared library pages charged elsewhere,
  # and read 68.9 MiB under a 64 MiB cap.
  fits=$(cq submit -q --ram 64M -- python3 -c 'a = bytearray(56 << 20); a[::4096] = b"x" * len(a[::4096])')
  wait_until 30 "the 56 MiB job ends" bash -c "[[ \$(cq show $fits --json | jq -r .job.state) != queued && \$(cq show $fits --json | jq -r .job.finished_ms) != 0 ]]"
  peak=$(cq show "$fits" --json | jq -r '.allocations[0].peak_ram_bytes')
  ((peak <= 64 * mib)) || fail "a job under --ram 64M reports a peak of $peak bytes, above its cap"
  pass "a job's peak is its memory group's, never above its cap ($((peak / mib)) MiB under 64 MiB)"
else
  echo "skip: cgroup v1 part (needs root and the v1 memory controller)"
  skipped=1
fi

# Force the watchdog: stop the node, configure, start it again.
node_pid=$(cat "$state/node.pid")
kill "$node_pid"
wait_until 10 "cq-node stops" gone "$node_pid"
printf '\n[memory]\nmode = "watchdog"\n' >>"$node_dir/node.toml"
start_cq
wait_until 10 "the node reports watchdog" bash -c \
  "[[ \$(cq node ls --json | jq -r '.nodes[0].mem_cap_mode') == watchdog ]]"
check_mode watchdog
# Part of this test could not run here: ctest reports a skip, not a pass.
[[ ${skipped:-0} == 1 ]] && exit 77
exit 0
