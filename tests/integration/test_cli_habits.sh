#!/usr/bin/env bash
# Issue 19 item 12: habits from Slurm and pueue get cq's word for them, not
# "has no option"; a misspelt command gets the nearest one.
# All refused with exit 2 before anything reaches a coordinator.
source "$(dirname "$0")/lib.sh"
expect() { EXPECT_RC=2 expect_refused "$@"; } # exit 2 and PATTERN in the message
expect "cq submit has no --mem: use --ram SIZE" submit --mem 8G -- python3 train.py
expect "cq submit has no -J: use --name NAME" submit -J train -- python3 train.py
expect "cq run has no --time: use --timeout DURATION" run --time 10 -- python3 train.py
expect "cq submit has no --dependency: use --after JOB" submit --dependency afterok:1 -- true
expect "cq submit has no -a: use --array SPEC" submit -a 0-9 -- true
expect "--array: '9-0' is a range that goes down: write it 0-9" submit --array 9-0 -- true
expect "--array: 'x-2' is not an index or a range FIRST-LAST" submit --array x-2 -- true
expect "cq submit has no -ram: did you mean --ram?" submit -ram 1G -- true
expect "cq ls has no -all: did you mean --all?" ls -all
expect "cq cancel has no --all: use --mine for every live job of yours, --state live" cancel --all
# A command of commands names its own (CLI11 said "not expected: bogus").
expect "cq node has no command 'bogus'; its commands: invite, approve, enable," node bogus
expect "cq node has no command 'aprove'; did you mean 'cq node approve'?" node aprove
expect "cq profile has no command 'lss'; did you mean 'cq profile ls'?" profile lss
expect "--job-id: 'nope' is not a UUID (8-4-4-4-12 hex digits)" submit --job-id nope -- true
expect "cq submit has no option --bogus; the job's command comes after the options" submit --bogus -- true
expect "unknown command 'sbumit'; did you mean 'cq submit'?" sbumit -- true
expect "unknown command 'lgos'; did you mean 'cq logs'?" lgos JOB
expect "--tail: '-1' is not a number of lines (0 or more)" logs --tail -1 JOB
expect "--tail: 'abc' is not a number of lines (0 or more)" logs -n abc JOB
expect "cq run has no --array: it runs one job and follows it (cq submit --array queues" run --array 1-3 -- true
expect "cq run has no --json: it runs one job and follows it" run --json -- true
expect "--cpus: '-1' is below 0: give 0..1024" submit --cpus -1 -- true
expect "cq move needs where to: one of --front, --back, --before JOB, --after JOB, or --priority LEVEL" move JOB
# cq up checks the node's name before it starts anything (a refusal left
# a coordinator running).
expect "--node-name: 'bad name!' is not a name" up --node-name 'bad name!'
[[ ! -e $state/coordinator ]] || fail "a refused cq up made $state/coordinator"
expect "--limit: '-1' is not a number of rows (0 or more)" ls --limit -1
expect "--limit: '99999999999999999999' is not a number of rows (0 or more, and not that many)" ls --limit 99999999999999999999
# CLI11's words in cq's: a flag given twice, a bare cq (its help).
expect "--name: given 2 times; give it once" ls --name a --name b
set +e
bare=$(cq 2>&1)
rc=$?
set -e
[[ $rc == 2 && $bare == *"submit"* && $bare == *"Usage"* ]] || fail "a bare cq: exit $rc: $bare"
cq up --help | grep -q -- "--port PORT " || fail "cq up --help: $(cq up --help | grep -- --port)"
# Why a --from file cannot be read; --lost-after's other word; cq down of
# nothing says nothing of jobs.
expect "--from: cannot read $work/none.txt: No such file or directory" submit --from "$work/none.txt"
expect "--lost-after: duration 'bogus' is not a duration" submit --lost-after bogus -- true
EXPECT_RC=2 expect_refused ", or never" submit --lost-after bogus -- true
down=$(cq down 2>&1) || fail "cq down of nothing exited $?: $down"
[[ $down != *"keep running"* ]] || fail "cq down of nothing: $down"
