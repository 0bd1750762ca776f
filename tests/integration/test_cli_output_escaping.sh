#!/usr/bin/env bash
# Human output shows control characters as visible escapes: a job whose argv,
# cwd and derived name hold escape sequences, newlines and a tab, and whose
# cwd holds a byte that is not UTF-8, takes exactly one line in `cq ls`, and
# neither `cq ls`, `cq show` nor an error line sends a raw control byte or
# invalid UTF-8 to the terminal. JSON keeps the exact values (the bad byte as
# U+FFFD); `cq logs` prints the job's own bytes unchanged. (The bad byte is in
# the cwd only: the coordinator's store keeps argv and env as JSON and refuses
# a submit whose argv is not UTF-8.) `cq submit --name` accepts only [A-Za-z0-9._-]{1,64}.
source "$(dirname "$0")/lib.sh"

# no_controls TEXT: TEXT holds no C0 control byte other than newline, and no DEL.
no_controls() { ! printf '%s' "$1" | tr -d '\n' | LC_ALL=C grep -q '[[:cntrl:]]'; }
# utf8 TEXT: TEXT is valid UTF-8 (skipped where iconv is missing).
utf8() { ! command -v iconv >/dev/null || printf '%s' "$1" | iconv -f UTF-8 -t UTF-8 >/dev/null 2>&1; }
terminal() { [[ $(job_field "$1" state) =~ ^(succeeded|failed|cancelled)$ ]]; }

start_cq

# A working directory whose name holds a tab, an escape sequence and a byte
# that is not UTF-8, and a link to sh whose name (the job's default name)
# holds an escape sequence and a newline.
cwd=$work/cwd$'\t'tab$'\e'[7m$'\xff'
mkdir -p "$cwd" "$work/bin"
evil=$'\e[31mev\nil'
ln -s /bin/sh "$work/bin/$evil"
script=$'printf \'x\\033[0m\\n\'\n: \e[31mred'

j1=$(cq submit --cwd "$cwd" -- sh -c "$script")
j2=$(cq submit --cwd "$cwd" -- "$work/bin/$evil" -c 'exit 0')
[[ $j1 =~ ^[0-9a-f-]+$ && $j2 =~ ^[0-9a-f-]+$ ]] || fail "submit printed '$j1' and '$j2', not job ids"
wait_until 30 "job $j1 ends" terminal "$j1"
wait_until 30 "job $j2 ends" terminal "$j2"
[[ $(job_field "$j1" state) == succeeded ]] || fail "job $j1 is $(job_field "$j1" state)"
[[ $(job_field "$j2" state) == succeeded ]] || fail "job $j2 is $(job_field "$j2" state)"
pass "jobs with control characters in argv, cwd and name ran"

ls_out=$(cq ls --all)
no_controls "$ls_out" || fail "cq ls printed a raw control byte: $(printf '%s' "$ls_out" | od -c | head -20)"
utf8 "$ls_out" || fail "cq ls printed bytes that are not UTF-8"
lines=$(printf '%s\n' "$ls_out" | wc -l)
[[ $lines -eq 3 ]] || fail "cq ls printed $lines lines for 2 jobs: $ls_out"
[[ $(printf '%s\n' "$ls_out" | grep -c "^${j1:0:8}") -eq 1 && $(printf '%s\n' "$ls_out" | grep -c "^${j2:0:8}") -eq 1 ]] ||
  fail "cq ls does not start one line with each job's id prefix: $ls_out"
pass "cq ls prints one line per job and no raw control byte"

for j in "$j1" "$j2"; do
  show_out=$(cq show "$j")
  no_controls "$show_out" || fail "cq show $j printed a raw control byte: $(printf '%s' "$show_out" | od -c | head -40)"
  utf8 "$show_out" || fail "cq show $j printed bytes that are not UTF-8"
  cwd_line=$(printf '%s\n' "$show_out" | grep '^  directory ') || fail "cq show $j has no directory line"
  [[ $cwd_line == *'cwd\ttab\e[7m\xff' ]] || fail "cq show $j cwd line is '$cwd_line'"
done
argv_line=$(COLUMNS=1000 cq show "$j1" | grep '^  command ')
no_controls "$argv_line" || fail "cq show's command line has a raw control byte: $argv_line"
# The command as a shell reads it back (bash's $'...'): the same words.
eval "set -- ${argv_line#  command }"
[[ $# == 3 && $1 == sh && $2 == -c && $3 == "$script" ]] ||
  fail "cq show argv line '$argv_line' reads back as $# words: $*"
pass "cq show prints argv and cwd with visible escapes, the command as a shell line"

# JSON carries the exact values, and the job's own output stays raw.
[[ $(cq show "$j1" --json | jq -r '.job.argv[2]') == "$script" ]] || fail "JSON argv differs"
[[ $(cq show "$j1" --json | jq -r '.job.cwd') == "${cwd%$'\xff'}"$'\xef\xbf\xbd' ]] ||
  fail "JSON cwd is not the cwd with U+FFFD for the bad byte"
[[ $(cq logs "$j1") == $'x\e[0m' ]] || fail "cq logs did not print the job's bytes unchanged"
pass "--json keeps the exact values and cq logs the raw output"

set +e
err=$(cq show $'\e[31mno\nsuch' 2>&1 >/dev/null)
rc=$?
set -e
[[ $rc -ne 0 ]] || fail "cq show of a bogus id succeeded"
no_controls "$err" || fail "the error line has a raw control byte: $(printf '%s' "$err" | od -c | head)"
[[ $(printf '%s\n' "$err" | wc -l) -eq 1 ]] || fail "the error is not one line: $err"
pass "an error quoting control characters is one escaped line"

set +e
err=$(cq submit --name $'a\e[31mb' -- true 2>&1 >/dev/null)
rc=$?
set -e
[[ $rc -eq 2 && $err == *"--name: "* ]] || fail "--name with an escape gave rc $rc: $err"
no_controls "$err" || fail "the --name refusal has a raw control byte"
for bad in '' 'has space' "$(printf 'x%.0s' {1..65})" 'caf'$'\xc3\xa9'; do
  set +e
  err=$(cq submit --name "$bad" -- true 2>&1 >/dev/null)
  rc=$?
  set -e
  [[ $rc -eq 2 && $err == *"--name: "* ]] || fail "--name '$bad' gave rc $rc: $err"
done
ok=$(cq submit --name 'Train-7.b_x' -- true)
wait_until 30 "job $ok ends" terminal "$ok"
[[ $(job_field "$ok" name) == Train-7.b_x ]] || fail "a valid --name was not kept"
pass "--name accepts [A-Za-z0-9._-]{1,64} and refuses anything else, naming the flag"
