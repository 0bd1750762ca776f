#!/usr/bin/env bash
# Issue 9, acceptance 5 (the command line): cq-coordinator --check-config
# accepts a valid settings file and refuses bad values naming the field; the
# flags that override the file are checked the same way.
source "$(dirname "$0")/lib.sh"
cfg=$work/coordinator.toml
printf '[scheduler]\nlease = "1h"\nyield_grace = "2m"\n[nodes]\ntimeout = "45s"\nlost_after = "never"\n[notify_blocked_after]\nyield = "10m"\nother = "20m"\n[retention]\nhistory = "7d"\nhistory_jobs = 5000\n' >"$cfg"
out=$(cq-coordinator --config "$cfg" --check-config 2>&1) || fail "a valid file was refused: $out"
pass "a valid settings file is accepted: $out"
check_refused() { # TEXT FIELD
  printf '%b' "$1" >"$cfg"
  local rc=0 out
  out=$(cq-coordinator --config "$cfg" --check-config 2>&1) || rc=$?
  [[ $rc == 2 ]] || fail "'$1' exited $rc: $out"
  grep -q "$2" <<<"$out" || fail "the refusal of '$1' does not name $2: $out"
  grep -q "coordinator.toml:[0-9]" <<<"$out" || fail "the refusal of '$1' names no line: $out"
}
check_refused '[notify_blocked_after]\nyield = "0s"\n' "notify_blocked_after.yield"
check_refused '[notify_blocked_after]\nother = "-5m"\n' "notify_blocked_after.other"
check_refused '[notify_blocked_after]\nother = 30\n' "notify_blocked_after.other"
check_refused '[scheduler]\nleese = "1m"\n' "scheduler.leese"
check_refused '[sched]\nlease = "1m"\n' "sched"
check_refused '[retention]\nhistory_jobs = 0\n' "retention.history_jobs"
check_refused '[retention]\nhistory_jobs = "lots"\n' "retention.history_jobs"
pass "zero, negative, numeric values and unknown keys or tables are refused naming them"
rc=0
out=$(cq-coordinator --lost-after soon --check-config --config /dev/null 2>&1) || rc=$?
[[ $rc == 2 ]] && grep -q -- "--lost-after" <<<"$out" || fail "a bad --lost-after: rc $rc: $out"
rc=0
out=$(cq-coordinator --check-config 2>&1) || rc=$?
[[ $rc == 2 ]] || fail "--check-config without --config exited $rc"
pass "a bad flag value is refused naming the flag; --check-config needs --config"
