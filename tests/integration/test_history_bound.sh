#!/usr/bin/env bash
# Issue 20 (memory that stays bounded), ADR 0071: a coordinator given
# [retention] history_jobs keeps at most that many finished jobs, the newest,
# whatever ran before, in the store and in memory: also after a restart with
# a smaller bound; a queued job stays; a forgotten job's id is answered with
# how much history is kept. The node removes the forgotten jobs'
# directories when told (ADR 0072), also those forgotten at a restart.
source "$(dirname "$0")/lib.sh"
printf '[retention]\nhistory_jobs = 5\n' >"$work/coordinator.toml"
start_coordinator "$CQ_URL" --config "$work/coordinator.toml"
join_node n1 --mem-total 68719476736 --mem-available 68719476736 --cpus 16
queued=$(cq submit -q --ram 1T --hold-for-node -- true)
first_id=$(cat /proc/sys/kernel/random/uuid)
first=$(cq submit -q --job-id "$first_id" --cpus 0 -- true)
cq wait "$first" >/dev/null || fail "the first job did not succeed"
array=$(cq submit -q --cpus 0 --array 1-12 -- true)
# Not `cq wait`: the bound may forget a task before it looks at it.
live() { [[ $(cq ls --json | jq '.jobs | length') == 1 ]]; }
wait_until 20 "every task ended (only the queued job is live)" live
finished() { cq ls --all --json | jq '[.jobs[] | select(.state == "succeeded")] | length'; }
at_most() { (($(finished) <= $1)); }
wait_until 10 "at most 5 finished jobs are listed" at_most 5
[[ $(finished) == 5 ]] || fail "$(finished) finished jobs are kept, not 5"
kept=$(cq ls --all --json | jq --arg a "$array" '[.jobs[] | select(.state == "succeeded" and .array == $a)] | length')
[[ $kept == 5 ]] || fail "$kept of the 5 kept jobs are the array's tasks (the first job ended before them)"
[[ $(job_field "$queued" state) == queued ]] || fail "the queued job was touched"
rc=0
out=$(cq show "$first" 2>&1) || rc=$?
[[ $rc != 0 && $out == *"no job"*"finished jobs are kept for 30d, at most 5 of them"* ]] ||
  fail "cq show of a forgotten job: rc $rc: $out"
pass "13 jobs finished: the newest 5 are kept, the queued one stays; a forgotten one says why: $out"

# Its submit retried with its id (a lost reply): a replay, nothing runs (ADR
# 0073). Its environment must be the first submit's (SHLVL too: bash runs a
# command substitution with a redirection inside it one shell level down).
{ out=$(cq submit --job-id "$first_id" --cpus 0 -- true); } 2>"$work/err" ||
  fail "the replay failed: $(cat "$work/err")"
[[ $out == "$first_id" ]] || fail "the replay printed $out"
grep -q "job $first_id was submitted before with this --job-id and has ended (succeeded); nothing new was queued" "$work/err" ||
  fail "the replay of a forgotten job said: $(cat "$work/err")"
[[ $(cq ls --json | jq '.jobs | length') == 1 && $(finished) == 5 ]] ||
  fail "the replay of a forgotten job queued one"
EXPECT_RC=5 expect_refused "existed with another spec" submit --job-id "$first_id" --cpus 0 -- false
pass "a forgotten job's submit retried with its id is a replay; another command is a conflict"

count_dirs() { find "$1" -mindepth 1 -maxdepth 1 -type d | wc -l; }
node_keeps() {
  (($(count_dirs "$state/n1/allocations") == $1 && $(count_dirs "$state/n1/jobs") == $1))
}
wait_until 10 "the node keeps the 5 kept jobs' directories, not 13" node_keeps 5
for j in $(cq ls --all --json | jq -r '.jobs[] | select(.state == "succeeded") | .id'); do
  [[ -d $state/n1/jobs/$j ]] || fail "the node removed kept job $j's state dir"
done
pass "the node removed the 8 forgotten jobs' directories"

pid=$(cat "$state/coordinator.pid")
kill -9 "$pid"
wait_until 10 "the coordinator is gone" gone "$pid"
printf '[retention]\nhistory_jobs = 2\n' >"$work/coordinator.toml"
cq-coordinator --state "$state/coordinator" --bind "$CQ_URL" --config "$work/coordinator.toml" \
  >>"$state/coordinator.log" 2>&1 &
echo $! >"$state/coordinator.pid"
wait_until 10 "the restarted coordinator answers" cq node ls
wait_until 10 "at most 2 finished jobs are listed after the restart" at_most 2
[[ $(finished) == 2 ]] || fail "$(finished) finished jobs after the restart, not 2"
[[ $(job_field "$queued" state) == queued ]] || fail "the queued job was touched at the restart"
grep -q "forgot .* finished jobs: more than 2 were kept" "$state/coordinator.log" ||
  fail "the coordinator's log does not say what it forgot"
wait_until 20 "the node keeps the 2 kept jobs' directories once it reconnects" node_keeps 2
pass "restarted with a bound of 2: the newest 2 are kept, also on the node"

# A dry run counts what cq clean would forget, and changes nothing.
out=$(cq clean --dry-run)
[[ $out == "would forget 2 finished jobs; nothing changed"* ]] || fail "cq clean --dry-run said: $out"
[[ $(cq clean -n --json) == *'"forgotten":2'*'"dry_run":true'* ]] ||
  fail "cq clean -n --json: $(cq clean -n --json)"
[[ $(cq clean -n --older-than 1d) == "would forget 0 finished jobs that ended more than 1d ago"* ]] ||
  fail "cq clean -n --older-than 1d: $(cq clean -n --older-than 1d)"
node_keeps 2 || fail "cq clean --dry-run removed directories"
pass "cq clean --dry-run: $out"

out=$(cq clean)
[[ $out == "forgot 2 finished jobs; their nodes delete their logs and files" ]] ||
  fail "cq clean said: $out"
wait_until 10 "the node keeps no finished job's directory after cq clean" node_keeps 0
trash_empty() { (($(count_dirs "$state/n1/trash") == 0)); }
wait_until 10 "the node's trash is emptied (removals go through it, ADR 0072)" trash_empty
[[ $(job_field "$queued" state) == queued ]] || fail "cq clean touched the queued job"
pass "cq clean: $out; the node removed them"
