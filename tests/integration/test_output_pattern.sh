#!/usr/bin/env bash
# Issue 19: cq submit --output PATTERN writes a job's output (stdout and
# stderr) to a file of its own as well, with %j %a %x %n expanded (job id,
# array index, name, node), as sbatch --output does; cq logs keeps showing it.
# The file grows while the job runs; a relative pattern is under the job's
# working directory; a bad pattern is refused at submit naming --output; a
# file that cannot be written is said in cq logs and the job still runs.
# (Run-as: the file is written as the job's user, test_run_as.sh.)
source "$(dirname "$0")/lib.sh"
start_cq
out=$work/out
mkdir -p "$out"

one=$(cq submit --quiet --name train --output "$out/%x-%j.log" -- sh -c 'echo to-stdout; echo to-stderr >&2; exit 4')
wait_until 30 "the job ends" job_state_is "$one" failed
file=$out/train-$one.log
[[ -f $file ]] || fail "no $file: $(ls -l "$out")"
[[ $(sort "$file") == $'to-stderr\nto-stdout' ]] || fail "the file holds: $(cat "$file")"
[[ $(cq logs "$one" | sort) == $'to-stderr\nto-stdout' ]] || fail "cq logs holds: $(cq logs "$one")"
pass "stdout and stderr in $file and in cq logs"
shown=$(cq show "$one")
[[ $shown == *"$file"* ]] || fail "cq show does not name the file: $shown"
pass "cq show names the expanded file"

# An array, a relative pattern (under the working directory), %a and %n, %%.
cd "$work"
arr=$(cq submit --quiet --array 0-2 --name sweep --output 'out/%x_%a_%n_100%%.txt' -- sh -c 'echo task $CQ_ARRAY_INDEX')
timeout 60 cq wait "$arr" >/dev/null || fail "the array did not succeed: $(cq ls --all --expand)"
node=$(cq node ls --json | jq -r '.nodes[0].name')
for i in 0 1 2; do
  f="$out/sweep-${i}_${i}_${node}_100%.txt"
  [[ -f $f && $(cat "$f") == "task $i" ]] || fail "task $i: $f: $(ls "$out")"
done
pass "an array's tasks each wrote out/sweep-I_I_${node}_100%.txt"

# The file grows while the job runs.
live=$(cq submit --quiet --output "$out/live.txt" -- sh -c 'echo first; exec sleep 60')
wait_until 30 "the running job's first line is in its file" grep -q first "$out/live.txt"
job_state_is "$live" running || fail "the job is not running: $(job_field "$live" state)"
cq cancel "$live" >/dev/null
wait_until 30 "the job is cancelled" job_state_is "$live" cancelled
pass "the file has a running job's output"

# A file that cannot be written: said in cq logs, and the job still runs.
lost=$(cq submit --quiet --output "$work/no-such-dir/x.txt" -- sh -c 'echo still-here')
wait_until 30 "the job ends" job_state_is "$lost" succeeded
logs=$(cq logs "$lost")
[[ $logs == *"--output $work/no-such-dir/x.txt: No such file or directory"* && $logs == *still-here* ]] ||
  fail "cq logs: $logs"
pass "an unwritable --output is said in cq logs: $(head -n 1 <<<"$logs")"

# Bad patterns are refused at submit, naming --output.
EXPECT_RC=2 expect_refused "--output: has %q" submit --output "$out/%q.txt" -- true
EXPECT_RC=2 expect_refused "--output: ends with a lone %" submit --output "$out/x%" -- true
EXPECT_RC=2 expect_refused "--output: names a directory" submit --output "$out/" -- true
[[ -z $(cq ls --json --state queued | jq -r '.jobs[].id') ]] || fail "a refused submit queued a job"
pass "refused submits queued nothing"
