#!/usr/bin/env bash
# Issue 19, acceptance 1 (without --pty): `cq run` streams the job's output
# while it runs and exits with the job's exit code; a signal is 128+N, an
# OOM 137; the first Ctrl-C cancels the job (and says so), and cq run then
# exits 130 once the job ended cancelled.
source "$(dirname "$0")/lib.sh"
start_cq

# Output while it runs: the job waits on a gate after its first line.
gate=$work/gate
cq run -- sh -c "echo before; while [ ! -e $gate ]; do sleep 0.05; done; echo after; exit 7" \
  >"$work/run.out" 2>"$work/run.err" &
runner=$!
wait_until 30 "the first line arrives while the job runs" grep -qx before "$work/run.out"
! grep -q after "$work/run.out" || fail "the second line came before the gate opened"
job=$(sed -n 's/^cq: job \([0-9a-f-]*\) (Ctrl-C.*/\1/p' "$work/run.err")
[[ $(job_field "$job" state) == running ]] || fail "the job is $(job_field "$job" state), not running"
touch "$gate"
set +e
wait "$runner"
rc=$?
set -e
[[ $rc == 7 ]] || fail "cq run of a job that exits 7 exited $rc ($(cat "$work/run.err"))"
[[ $(cat "$work/run.out") == $'before\nafter' ]] || fail "cq run printed: $(cat "$work/run.out")"
pass "cq run: the output arrived while the job ran, and it exited 7 like the job"
# Its last line says how the job ended as cq ls does, without internal names.
grep -qx "cq: job $job failed: exit 7" "$work/run.err" ||
  fail "cq run's last line: $(tail -n 1 "$work/run.err")"
pass "cq run ends with: $(tail -n 1 "$work/run.err")"

# -q: only the job's output; cq's own line only when the job fails.
cq run -q -- echo quiet >"$work/q.out" 2>"$work/q.err"
[[ $(cat "$work/q.out") == quiet && ! -s "$work/q.err" ]] ||
  fail "cq run -q -- echo quiet: out '$(cat "$work/q.out")', err '$(cat "$work/q.err")'"
set +e
cq run -q -- sh -c 'exit 3' >"$work/q3.out" 2>"$work/q3.err"
rc=$?
set -e
[[ $rc == 3 && $(wc -l <"$work/q3.err") == 1 ]] && grep -q "failed: exit 3$" "$work/q3.err" ||
  fail "cq run -q of a job that exits 3: rc $rc, err '$(cat "$work/q3.err")'"
pass "cq run -q: the job's output alone; a failure in one line: $(cat "$work/q3.err")"

set +e
cq run -- sh -c 'kill -TERM $$' >/dev/null 2>&1
rc=$?
cq run --ram 32M -- sh -c 'head -c 268435456 /dev/zero | tail -c 268435456 >/dev/null' \
  >"$work/oom.out" 2>&1
oom_rc=$?
set -e
[[ $rc == 143 ]] || fail "a job killed by SIGTERM: cq run exited $rc, not 143"
[[ $oom_rc == 137 ]] || fail "an OOM-killed job: cq run exited $oom_rc, not 137: $(cat "$work/oom.out")"
grep -q "^cq-node: killed: out of memory" "$work/oom.out" || fail "the kill line did not reach cq run"
pass "cq run: signal 15 -> 143; an OOM -> 137, with the node's kill line in the output"

# Across a retry, each attempt's output is read to its end before the next
# one's: both kill lines reach cq run (the first was lost when the read
# moved to the new attempt first).
set +e
cq run --ram 32M --retry-oom 1 -- sh -c 'head -c 268435456 /dev/zero | tail -c 268435456 >/dev/null' \
  >"$work/retry.out" 2>&1
retry_rc=$?
set -e
[[ $retry_rc == 137 ]] || fail "the retried OOM: cq run exited $retry_rc: $(cat "$work/retry.out")"
[[ $(grep -c "^cq-node: killed: out of memory" "$work/retry.out") == 2 ]] ||
  fail "not one kill line per attempt: $(cat "$work/retry.out")"
grep -q "moved to allocation" "$work/retry.out" || fail "no word of the second attempt: $(cat "$work/retry.out")"
pass "cq run across an OOM retry: each attempt's kill line, then the next attempt"

# Ctrl-C cancels.
cq run -- sh -c 'echo up; exec sleep 300' >"$work/cancel.out" 2>"$work/cancel.err" &
runner=$!
wait_until 30 "the long job runs" grep -qx up "$work/cancel.out"
kill -INT "$runner"
set +e
wait "$runner"
rc=$?
set -e
job=$(sed -n 's/^cq: job \([0-9a-f-]*\) (Ctrl-C.*/\1/p' "$work/cancel.err")
[[ $rc == 130 ]] || fail "after Ctrl-C cq run exited $rc, not 130: $(cat "$work/cancel.err")"
[[ $(job_field "$job" state) == cancelled ]] || fail "the job is $(job_field "$job" state), not cancelled"
grep -q "cancelling job $job" "$work/cancel.err" || fail "cq run did not say it cancels: $(cat "$work/cancel.err")"
grep -q "^cq: job $job cancelled; cq exits 130$" "$work/cancel.err" ||
  fail "cq run's last word after Ctrl-C: $(cat "$work/cancel.err")"
pass "Ctrl-C: $(grep cancelling "$work/cancel.err"); the job ended cancelled, cq run exited 130"

# SIGTERM (a kill) and SIGHUP (a closed terminal) cancel the job too, and
# cq run ends at once with 128 + the signal (it left the job running,
# saying nothing).
for sig in TERM HUP; do
  cq run -- sh -c 'echo up; exec sleep 300' >"$work/$sig.out" 2>"$work/$sig.err" &
  runner=$!
  wait_until 30 "the long job runs" grep -qx up "$work/$sig.out"
  kill "-$sig" "$runner"
  set +e
  wait "$runner"
  rc=$?
  set -e
  job=$(sed -n 's/^cq: job \([0-9a-f-]*\) (Ctrl-C.*/\1/p' "$work/$sig.err")
  want=$((128 + $(kill -l "$sig")))
  [[ $rc == "$want" ]] || fail "after SIG$sig cq run exited $rc, not $want: $(cat "$work/$sig.err")"
  grep -q "SIG$sig: job $job cancelled" "$work/$sig.err" || fail "after SIG$sig: $(cat "$work/$sig.err")"
  wait_until 30 "the job ends cancelled" job_state_is "$job" cancelled
done
pass "SIGTERM and SIGHUP: cq run cancels its job and exits 143 and 129"

# A pipe into cq run is not passed on, and cq run says so (it printed
# nothing, silently).
out=$(echo piped | cq run -- cat 2>&1)
grep -q "the job's stdin is /dev/null: cq run does not pass a pipe on" <<<"$out" || fail "echo | cq run: $out"
pass "a pipe into cq run: said to be /dev/null for the job"

# Under nohup (SIGHUP ignored) a hangup leaves cq run and its job alone: a
# Ctrl-C after it is what cancels.
nohup cq run -- sh -c 'echo up; exec sleep 300' >"$work/nohup.out" 2>"$work/nohup.err" &
runner=$!
wait_until 30 "the nohup job runs" grep -qx up "$work/nohup.out"
kill -HUP "$runner"
kill -INT "$runner"
set +e
wait "$runner"
rc=$?
set -e
[[ $rc == 130 && $(cat "$work/nohup.err") != *SIGHUP* ]] ||
  fail "nohup cq run after SIGHUP, SIGINT: exit $rc: $(cat "$work/nohup.err")"
pass "nohup cq run: a hangup is ignored, Ctrl-C still cancels"
