#!/usr/bin/env bash
# The job's command of `cq submit` and `cq run` starts at the first word that
# is not one of cq's options, with or without `--`, and every word after it
# is the command's, its options included: `cq submit grep --name x f` runs
# `grep --name x f`, it does not name the job x. A word before the command
# that looks like an option cq does not have is refused, naming it.
source "$(dirname "$0")/lib.sh"
start_coordinator
argv_of() { cq show "$1" --json | jq -c .job.argv; }
id=$(cq submit -q --hold-for-node grep --name foo x)
[[ $(argv_of "$id") == '["grep","--name","foo","x"]' ]] || fail "argv is $(argv_of "$id")"
[[ $(job_field "$id" name) != foo ]] || fail "the command's --name named the job"
id=$(cq submit -q --hold-for-node --ram 1G python3 -c 'print(1)')
[[ $(argv_of "$id") == '["python3","-c","print(1)"]' ]] || fail "argv is $(argv_of "$id")"
[[ $(job_field "$id" ram_bytes) == 1073741824 ]] || fail "--ram before the command was lost"
id=$(cq submit -q --hold-for-node --name n -- sh -c 'echo --name')
[[ $(argv_of "$id") == '["sh","-c","echo --name"]' && $(job_field "$id" name) == n ]] ||
  fail "after --: argv $(argv_of "$id"), name $(job_field "$id" name)"
pass "the command starts at its first word: its own options stay its own"
EXPECT_RC=2 expect_refused "cq submit has no option --bogus" submit --bogus true
EXPECT_RC=2 expect_refused "'hours' comes before \`--\`, where only options go" \
  submit --est 2 hours -- true
EXPECT_RC=2 expect_refused "cq run has no option --nope" run --nope -- true
[[ $(cq ls --json | jq '.jobs | length') == 3 ]] || fail "a refused submit queued a job"

# What the coordinator refuses names the flag the person typed, not the
# spec's field; a --job-id in capitals (macOS's uuidgen) is taken.
EXPECT_RC=3 expect_refused "--after: job: no job 'no-such-job'" submit --hold-for-node --after no-such-job -- true
EXPECT_RC=2 expect_refused "the command's word 1: must not be empty" submit --hold-for-node -- ''
upper=0B7E4F5C-ABCD-4222-8333-944455556666
[[ $(cq submit -q --hold-for-node --job-id "$upper" -- true) == "${upper,,}" ]] ||
  fail "a --job-id in capitals was not taken as its lowercase"
pass "refusals name flags; a --job-id in capitals is the same id"
