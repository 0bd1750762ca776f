#!/usr/bin/env bash
# Standby cq-shims (ADR 0048): on cgroup v1 the node keeps two shims started
# ahead, each already in a memory group of its own. A start takes one: its
# group is renamed for the allocation and capped, and the job runs there as
# any job does (its marker, its cap, its exit code). A node killed with -9
# leaves none running, and its next start removes their groups; cq down
# leaves none at all. The pool is topped up at once only when a start took
# the last standby, else after a quiet spell (ADR 0076).
source "$(dirname "$0")/lib.sh"
needs_root "memory cgroups"
start_cq
mode=$(cq node ls --json | jq -r '.nodes[0].mem_cap_mode')
[[ $mode == cgroup_v1 ]] || { echo "skip: standby shims need cgroup v1 here (mode $mode)"; exit 77; }
owner=$(head -c 12 "$state/node/daemon.id")
export state owner
# standby_pids: the standby shims of this node (its children, each in a
# standby group: the zygote that forks them is a child too, in the node's
# own group); standbys: how many; groups: how many standby groups of this
# node. (Other tests' nodes may have standbys too: only this node's count.)
standby_pids() {
  local p node
  node=$(cat "$state/node.pid")
  for p in $(pgrep -P "$node" -f "cq-shim --" || true); do
    if grep -q "^[0-9]*:memory:.*/cq-$owner-standby-[0-9]*$" "/proc/$p/cgroup" 2>/dev/null; then echo "$p"; fi
  done
  return 0
}
# The zygote (ADR 0060): the node's one child running `cq-shim --standby-zygote`
# outside every standby group.
zygote_pid() {
  local p node
  node=$(cat "$state/node.pid")
  for p in $(pgrep -P "$node" -f "cq-shim --standby-zygote" || true); do
    grep -q "standby" "/proc/$p/cgroup" 2>/dev/null || echo "$p"
  done
  return 0
}
standbys() { standby_pids | wc -l; }
groups() { find /sys/fs/cgroup -maxdepth 7 -type d -name "cq-$owner-standby-*" 2>/dev/null | wc -l; }

# The first start goes without (it turns the pool on); then two wait.
first=$(cq submit -q -- true)
wait_until 30 "the first job succeeds" job_state_is "$first" succeeded
wait_until 10 "two standby shims wait" bash -c "$(declare -f standby_pids standbys); [[ \$(standbys) == 2 ]]"
(($(groups) == 2)) || fail "$(groups) standby groups, not 2"
[[ $(zygote_pid | wc -l) == 1 ]] || fail "not one zygote: $(zygote_pid | tr '\n' ' ')"
for p in $(standby_pids); do
  [[ $(awk '{print $5}' "/proc/$p/stat") == "$p" ]] || fail "standby $p is not its process group's leader"
  args=$(tr '\0' ' ' <"/proc/$p/cmdline")
  [[ $args == *"cq-shim --standby 3 4 "* ]] || fail "standby $p's command line: $args"
done
pass "after the first start, two standby shims wait, each in a group of its own, forked by the zygote"

probe='g=$(grep memory /proc/self/cgroup | cut -d: -f3); echo "$g"; cat /sys/fs/cgroup/memory$g/memory.limit_in_bytes; echo "$CQ_ALLOCATION_ID"; exit 7'
job=$(cq submit -q --ram 96M --no-requeue -- sh -c "$probe")
wait_until 30 "the probe ends" bash -c "cq show $job --json | jq -e '.job.state == \"failed\"' >/dev/null"
alloc=$(cq show "$job" --json | jq -r .job.allocation)
out=$(cq logs "$job")
[[ $(sed -n 1p <<<"$out") == */cq-$owner-$alloc ]] || fail "the job's group: $(sed -n 1p <<<"$out")"
[[ $(sed -n 2p <<<"$out") == $((96 << 20)) ]] || fail "the job's cap: $(sed -n 2p <<<"$out")"
[[ $(sed -n 3p <<<"$out") == "$alloc" ]] || fail "the job's marker: $(sed -n 3p <<<"$out")"
[[ $(cq show "$job" --json | jq -r .job.exit_code) == 7 ]] || fail "exit code: $(cq show "$job" --json | jq .job)"
wait_until 10 "two standby shims wait again" bash -c "$(declare -f standby_pids standbys); [[ \$(standbys) == 2 ]]"
pass "a start through a standby: the group named for the allocation, its cap, its marker, its exit code"

# The standby runs the job's shim in place (ADR 0058): alloc.json names it
# before the launch, so a node killed with -9 finds it again without its
# `leader` file (and without a marker in the shim's own environment).
flag=$work/standby-go
held=$(cq submit -q --no-requeue -- sh -c "while [ ! -e $flag ]; do sleep 0.05; done; echo held")
wait_until 30 "the held job runs" job_state_is "$held" running
alloc=$(cq show "$held" --json | jq -r .job.allocation)
dir=$state/node/allocations/$alloc
read -r leader_pid _ <"$dir/leader" || fail "no leader file"
[[ $(jq -r .pid "$dir/alloc.json") == "$leader_pid" ]] ||
  fail "alloc.json names pid $(jq -r .pid "$dir/alloc.json"), the leader is $leader_pid"
grep -qz "^CQ_ALLOCATION_ID=" "/proc/$leader_pid/environ" &&
  fail "the standby shim was exec'ed again (its environment carries the job's marker)"
rm "$dir/leader"
kill_node
start_cq
wait_until 10 "the node re-adopts the held job" grep -q "re-adopted running pid $leader_pid" "$state/node.log"
touch "$flag"
wait_until 30 "the held job succeeds" job_state_is "$held" succeeded
[[ $(cq logs "$held") == held && $(job_field "$held" attempt) == 1 ]] ||
  fail "the held job: '$(cq logs "$held")', attempt $(job_field "$held" attempt)"
# The restarted node's first start turns its pool on again.
again=$(cq submit -q -- true)
wait_until 30 "the first job after the restart succeeds" job_state_is "$again" succeeded
wait_until 10 "two standby shims wait after the restart" bash -c "$(declare -f standby_pids standbys); [[ \$(standbys) == 2 ]]"
pass "a job run by a standby is re-adopted by the pid alloc.json names, after kill -9 of cq-node without its leader file"

# Standbys killed while they wait (the OOM killer, a person) are not used:
# the next start goes the old way, and new standbys take their place.
for p in $(standby_pids); do kill -9 "$p"; done
after_kill=$(cq submit -q -- sh -c 'exit 3')
wait_until 30 "the job after the kill ends" bash -c \
  "cq show $after_kill --json | jq -e '.job.state == \"failed\" and .job.exit_code == 3' >/dev/null"
wait_until 10 "two standby shims wait once more" bash -c "$(declare -f standby_pids standbys); [[ \$(standbys) == 2 ]]"
pass "killed standbys are not used: the start goes the old way (exit 3 reported), and two more wait"

# A zygote killed while it waits: the next standby finds it gone, and a new
# zygote forks the ones after (a standby is spawned meanwhile).
old_zygote=$(zygote_pid)
[[ -n $old_zygote ]] || fail "no zygote before its kill"
kill -9 "$old_zygote"
for i in 1 2 3; do
  j=$(cq submit -q -- true)
  wait_until 30 "job $i after the zygote's kill succeeds" job_state_is "$j" succeeded
done
wait_until 10 "two standby shims wait after the zygote's kill" bash -c "$(declare -f standby_pids standbys); [[ \$(standbys) == 2 ]]"
new_zygote=$(zygote_pid)
[[ -n $new_zygote && $new_zygote != "$old_zygote" ]] || fail "no new zygote (was $old_zygote, now '$new_zygote')"
[[ ! -e /proc/$old_zygote ]] || fail "the killed zygote $old_zygote was not reaped"
pass "a killed zygote is replaced: jobs run, two standbys wait, forked by a new zygote"

# kill -9: the standbys end with their socket; the next start removes their groups.
left="$(standby_pids | tr '\n' ' ') $(zygote_pid)"
[[ -n $(standby_pids) ]] || fail "no standby shim before the kill"
kill_node
for p in $left; do wait_until 10 "standby shim (or zygote) $p ends with its node" gone "$p"; done
old=$(find /sys/fs/cgroup -maxdepth 7 -type d -name "cq-$owner-standby-*" 2>/dev/null)
start_cq
wait_until 10 "the old standby groups are removed" bash -c \
  "for g in $(tr '\n' ' ' <<<"$old"); do [[ -d \$g ]] && exit 1; done; exit 0"
pass "a node killed with -9 leaves no standby running, and its next start removes their groups"

again=$(cq submit -q -- true)
wait_until 30 "a job after the restart succeeds" job_state_is "$again" succeeded
cq down >/dev/null
wait_until 10 "cq down leaves no standby group" bash -c "[[ \$(find /sys/fs/cgroup -maxdepth 7 -type d -name 'cq-$owner-standby-*' | wc -l) == 0 ]]"
pass "cq down leaves no standby shim and no standby group"

# ADR 0076: while a standby still waits, the pool is topped up only once no
# start asked for one for a while (CQ_STANDBY_QUIET_MS, here a minute), so a
# short job's end does not wait behind a standby's move into its group. A
# start that takes the last one has the pool topped up at once.
CQ_STANDBY_QUIET_MS=60000 start_cq
owner=$(head -c 12 "$state/node/daemon.id")
first=$(cq submit -q -- true)
wait_until 30 "the first job of the new node succeeds" job_state_is "$first" succeeded
wait_until 10 "two standby shims wait (none was left)" bash -c "$(declare -f standby_pids standbys); [[ \$(standbys) == 2 ]]"
# A standby counts once it is in its group, a moment before it is ready: a
# start in that moment goes without one (alloc.json then names no pid) and
# leaves the pool as it was, so the next start tries again.
for try in 1 2 3 4 5; do
  short=$(cq submit -q -- true)
  wait_until 30 "the short job succeeds" job_state_is "$short" succeeded
  alloc=$(cq show "$short" --json | jq -r .job.allocation)
  [[ $(jq -r '.pid // empty' "$state/node/allocations/$alloc/alloc.json") ]] && break
  ((try < 5)) || fail "no start went through a standby in 5 tries"
done
[[ $(standbys) == 1 ]] || fail "$(standbys) standby shims after a start that left one: the pool was topped up at once"
last=$(cq submit -q -- true)
wait_until 30 "the job that takes the last standby succeeds" job_state_is "$last" succeeded
wait_until 10 "two standby shims wait again (the last was taken)" bash -c "$(declare -f standby_pids standbys); [[ \$(standbys) == 2 ]]"
pass "a start that leaves a standby waits for a quiet spell to top the pool up; one that takes the last tops it up at once"
cq down >/dev/null
