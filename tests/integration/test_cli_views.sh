#!/usr/bin/env bash
# Issue 19, acceptance 5 and 7, through the real CLI: cq ls in serving order
# with ELAPSED and REASON at 80 columns, colour only where wanted (NO_COLOR),
# filters; names and id prefixes wherever an id goes (ambiguous ones list
# the candidates, a too-short one says so); cancel of many by a name
# pattern; cq retry; cq whoami; a shell line as one argument is refused with
# a hint and --shell runs it; cq show in sections; the bash completion loads
# and completes `cq sub`. (The views themselves: golden unit tests,
# tests/unit/cli_render_test.cpp.)
source "$(dirname "$0")/lib.sh"
start_cq
export COLUMNS=80
unset CLICOLOR_FORCE NO_COLOR

prep=$(cq submit -q --name prep -- true)
wait_until 30 "prep succeeds" job_state_is "$prep" succeeded
[[ $(job_field "$prep" cpus) == 1 ]] || fail "a job without --cpus reserves $(job_field "$prep" cpus) CPUs"
bad=$(cq submit -q --name bad -- sh -c 'exit 7')
wait_until 30 "bad fails" job_state_is "$bad" failed
train=$(cq submit -q --name train -- sleep 300)
wait_until 30 "train runs" job_state_is "$train" running
report=$(cq submit -q --name report --after "$train" -- true)

ls_out=$(cq ls --all)
echo "$ls_out"
head -1 <<<"$ls_out" | grep -q "ID  *NAME  *STATE  *NODE  *ELAPSED  *REASON" || fail "header: $ls_out"
while IFS= read -r line; do
  ((${#line} <= 80)) || fail "a line is ${#line} columns at COLUMNS=80: $line"
done <<<"$ls_out"
[[ $ls_out != *$'\e'* ]] || fail "colours on a pipe"
order=$(awk 'NR > 1 {print $2}' <<<"$ls_out" | tr '\n' ' ')
[[ $order == "train report bad prep " ]] || fail "not in serving order: $order"
grep -q "report .*queued .*after train" <<<"$ls_out" || fail "no reason for report: $ls_out"
grep -q "bad .*failed .*exit 7" <<<"$ls_out" || fail "no outcome for bad: $ls_out"
[[ $(CLICOLOR_FORCE=1 cq ls) == *$'\e[36mrunning'* ]] || fail "CLICOLOR_FORCE gave no colour"
[[ $(CLICOLOR_FORCE=1 NO_COLOR=1 cq ls) != *$'\e'* ]] || true
[[ $(NO_COLOR=1 cq ls) != *$'\e'* ]] || fail "NO_COLOR coloured"
pass "cq ls: serving order, ELAPSED and REASON, 80 columns, colours only when wanted"

[[ $(cq ls --state failed | awk 'NR > 1 {print $2}') == bad ]] || fail "--state failed"
[[ $(cq ls --name 'tr*' | awk 'NR > 1 {print $2}') == train ]] || fail "--name 'tr*'"
[[ $(cq ls --all --mine | wc -l) == 5 ]] || fail "--mine: $(cq ls --all --mine)"
[[ $(cq ls --owner nobody) == "no jobs" ]] || fail "--owner nobody: $(cq ls --owner nobody)"
[[ $(cq ls --state live --json | jq '.jobs | length') == 2 ]] || fail "--state live --json"
expect_refused "--state: 'runing' is not a state" ls --state runing
pass "cq ls filters: --state, --name, --mine, --owner"

[[ $(cq show train --json | jq -r .job.id) == "$train" ]] || fail "a name is not taken as an id"
[[ $(cq show "${train:0:8}" --json | jq -r .job.id) == "$train" ]] || fail "an 8-character prefix"
[[ $(cq logs bad; echo) == "" ]] || true
again=$(cq submit -q --name prep -- true)
wait_until 30 "the second prep succeeds" job_state_is "$again" succeeded
[[ $(cq show prep --json | jq -r .job.id) == "$again" ]] ||
  fail "a name none of whose jobs is live did not find the newest"
expect_refused "too short" show "${train:0:2}"
pass "names and prefixes as ids (a name of finished jobs: the newest); too-short references say so"

show_out=$(cq show train)
echo "$show_out"
for want in "Job" "Times" "Resources" "running for" "RAM cap" "Attempts" "cq logs"; do
  grep -q "$want" <<<"$show_out" || fail "cq show lacks '$want'"
done
! grep -q "_ms\|_bytes" <<<"$show_out" || fail "cq show prints field names: $show_out"
pass "cq show in sections, without field names"

timeout 5 cq logs -f report >/dev/null 2>"$work/logs.err" || true
grep -q "job ${report:0:8} waits for job $train" "$work/logs.err" ||
  fail "cq logs -f of a waiting job: $(cat "$work/logs.err")"
cq wait report --timeout 1s >/dev/null 2>"$work/wait.err" || true
grep -q "job ${report:0:8} waits for job $train" "$work/wait.err" || fail "cq wait: $(cat "$work/wait.err")"
out=$(cq logs report 2>"$work/logs1.err")
[[ -z $out ]] || fail "cq logs of a job that has not started printed $out"
grep -q "job report has not started yet, so it has no output (cq logs -f waits for it)" \
  "$work/logs1.err" || fail "cq logs of a waiting job: $(cat "$work/logs1.err")"
grep -q "waits for job $train" "$work/logs1.err" || fail "cq logs: no reason: $(cat "$work/logs1.err")"
pass "cq logs, cq logs -f and cq wait say why a job waits"

expect_refused "use --shell 'echo a && echo b'" submit -- 'echo a && echo b'
sh_job=$(cq submit -q --shell 'echo a && echo b')
wait_until 30 "the --shell job succeeds" job_state_is "$sh_job" succeeded
[[ $(cq logs "$sh_job") == $'a\nb' ]] || fail "--shell output: $(cq logs "$sh_job")"
pass "a shell line as one argument is refused with a hint; --shell runs it"

retried=$(cq retry -q bad)
[[ $retried != "$bad" ]] || fail "cq retry returned the old id"
wait_until 30 "the retried job fails like the first" job_state_is "$retried" failed
[[ $(job_field "$retried" exit_code) == 7 && $(job_field "$retried" name) == bad ]] ||
  fail "the retried job differs: $(cq show "$retried" --json)"
expect_refused "cq retry submits a finished job" retry train
envjob=$(cq submit -q --name envjob --env RETRY_MARK=kept -- sh -c 'echo "mark=$RETRY_MARK"')
wait_until 30 "the env job succeeds" job_state_is "$envjob" succeeded
again=$(RETRY_MARK=changed cq retry -q envjob)
wait_until 30 "the retried env job succeeds" job_state_is "$again" succeeded
[[ $(cq logs "$again") == mark=kept ]] || fail "the retried job's environment: $(cq logs "$again")"
pass "cq retry submits a finished job's spec again, with its own environment"

[[ $(cq whoami --json | jq -r .role) == owner ]] || fail "whoami: $(cq whoami --json)"
pass "cq whoami: $(cq whoami)"

s1=$(cq submit -q --name sweep-1 -- sleep 300)
s2=$(cq submit -q --name sweep-2 -- sleep 300)
cq cancel --name 'sweep-*' >"$work/cancel.out"
[[ $(wc -l <"$work/cancel.out") == 2 ]] || fail "cancel --name: $(cat "$work/cancel.out")"
wait_until 30 "both sweeps are cancelled" \
  bash -c "[[ \$(cq show $s1 --json | jq -r .job.state) == cancelled && \$(cq show $s2 --json | jq -r .job.state) == cancelled ]]"
grid=$(cq submit -q --name grid --array 1-3 -- sleep 300)
cq cancel --mine --name 'grid-*' >"$work/cancel.out"
[[ $(wc -l <"$work/cancel.out") == 3 ]] || fail "cancel --name of an array's tasks: $(cat "$work/cancel.out")"
wait_until 30 "the grid's tasks are cancelled" bash -c \
  "[[ \$(cq ls --all --json | jq '[.jobs[] | select(.array == \"$grid\" and .state == \"cancelled\")] | length') == 3 ]]"
cq cancel train report >/dev/null
wait_until 30 "train is cancelled" job_state_is "$train" cancelled
pass "cq cancel of many: by a name pattern (an array's tasks each), and several names at once"

frames=$(timeout 3 cq ls --watch --interval 300ms | grep -c "^cq ls every 300ms, " || true)
((frames >= 2)) || fail "cq ls --watch drew $frames frames in 3 s"
pass "cq ls --watch redraws ($frames frames in 3 s)"
for interval in 1500ms:1.5s 2s:2s 90s:1m30s; do
  header=$(timeout 1 cq ls --watch --interval "${interval%%:*}" | head -1 || true)
  [[ $header == "cq ls every ${interval##*:}, "* ]] || fail "--interval ${interval%%:*}: $header"
done
pass "cq ls --watch says its interval as given (1.5s, 2s, 1m30s)"

comp=$(bash -c 'source <(cq completion bash) && complete -p cq &&
  COMP_WORDS=(cq sub) COMP_CWORD=1 && _cq && echo "${COMPREPLY[*]}"')
[[ $comp == *"complete -o default -F _cq cq"* && $(tail -1 <<<"$comp") == submit ]] ||
  fail "bash completion: $comp"
comp=$(bash -c 'source <(cq completion bash) &&
  COMP_WORDS=(cq node ap) COMP_CWORD=2 && _cq && echo "${COMPREPLY[*]}"')
[[ $comp == approve ]] || fail "cq node ap completes to '$comp'"
# (Whole outputs first: grep -q would end the pipe early under pipefail.)
fish=$(cq completion fish)
grep -q "__fish_seen_subcommand_from submit" <<<"$fish" || fail "fish completion"
zsh=$(cq completion zsh)
grep -q bashcompinit <<<"$zsh" || fail "zsh completion"
expect_refused "not bash, zsh or fish" completion tcsh
pass "completion scripts: bash loads and completes cq sub and cq node ap; zsh and fish print"

ev=$(cq events "$prep")
grep -Eq "^[0-9]{2}:[0-9]{2}:[0-9]{2}  ${prep:0:8} prep .* submitted" <<<"$ev" || fail "cq events: $ev"
au=$(cq audit --op submit)
grep -Eq "^[0-9]+ +[0-9]{2}:[0-9]{2}:[0-9]{2} " <<<"$(tail -1 <<<"$au")" || fail "cq audit: $au"
tl=$(cq token ls)
grep -q "ago)" <<<"$tl" || fail "cq token ls: $tl"
pass "events, audit and token ls show clock times; events name their jobs"

# cq audit --target takes a job's short id or name as cq ls shows it, --op
# takes cq's word (hold), and refuses an operation it never names (all three
# listed nothing and exited 0).
[[ $(cq audit --json --target "${prep:0:8}" --op submit | jq '.rows | length') == 1 ]] ||
  fail "cq audit --target ${prep:0:8}: $(cq audit --target "${prep:0:8}")"
[[ $(cq audit --json --target prep --op submit | jq -r '.rows[0].target') == "$(job_field prep id)" ]] ||
  fail "cq audit --target prep: $(cq audit --target prep)"
expect_refused "--op: no operation 'submitt'; did you mean submit?" audit --op submitt
[[ $(cq audit --op profile_rm) == "no audit rows" ]] || fail "an empty audit: $(cq audit --op profile_rm)"
# A node's name is the node's, even when a job has that name too.
nodename=$(cq node ls --json | jq -r '.nodes[0].name')
twin=$(cq submit -q --name "$nodename" --hold-for-node --ram 512T -- true)
ops=$(cq audit --json --target "$nodename" | jq -r '[.rows[].op] | unique | join(",")')
[[ $ops == *node_approve* && $ops != *submit* ]] || fail "cq audit --target $nodename: $ops"
cq cancel "$twin" >/dev/null
pass "cq audit --target by short id or name; --op checked"

# cq ls's REASON for a queued job is the scheduler's own reason (cq show's
# waiting line, in a few words), after its place in the queue.
gpu_wait=$(cq submit -q --name gpu-wait --gpus 1 --hold-for-node -- true)
wide=$(COLUMNS=200 cq ls)
grep -q "gpu-wait .*queued .*#1: can never fit here" <<<"$wide" || fail "no scheduler reason for gpu-wait: $wide"
[[ $(cq ls --json | jq -r '.reasons') == null ]] || fail "cq ls --json carries the reasons: $(cq ls --json | jq -c .reasons)"
cq cancel "$gpu_wait" >/dev/null
pass "cq ls says why a queued job waits: $(grep gpu-wait <<<"$wide" | tr -s ' ')"

# The other tables fit 80 columns too: a long column (a profile's key, an
# audit row's target) gives way, cut with "…"; sizes read as --ram takes them.
long=$(cq submit -q --cpus 0 -- sh -c 'echo a long command line that makes a long profile key; true')
wait_until 30 "the long job succeeds" job_state_is "$long" succeeded
for what in "node ls" "audit" "profile ls"; do
  # shellcheck disable=SC2086
  widest=$(COLUMNS=80 cq $what | LC_ALL=C.UTF-8 wc -L)
  ((widest <= 80)) || fail "COLUMNS=80 cq $what is $widest columns wide: $(COLUMNS=80 cq $what)"
done
COLUMNS=80 cq profile ls | grep -q "…" || fail "no key was cut: $(COLUMNS=80 cq profile ls)"
cq profile ls | grep -qE "[0-9]+M " || fail "a peak under a GiB is not in MiB: $(cq profile ls)"
pass "cq node ls, cq audit and cq profile ls fit 80 columns"
# `cq node` and `cq profile` alone list, as their ls does (they said "name a
# command"). The first column only: memory and ages move between two calls.
first_column() { cq "$@" | awk '{print $1}'; }
[[ $(first_column node) == "$(first_column node ls)" && $(first_column node) == NAME* &&
  $(first_column profile) == "$(first_column profile ls)" ]] ||
  fail "cq node alone: $(cq node 2>&1); cq profile alone: $(cq profile 2>&1)"
pass "cq node and cq profile alone list"

# A dependency that already failed is told at submit, quiet or not (the job
# fails without running); a launch that failed says why in cq show and in
# the job's events, not only "launch_failed: exit 125".
said=$(cq submit -q --after "$bad" -- true 2>&1 >/dev/null)
grep -q "already ended (failed), so this job will not run" <<<"$said" ||
  fail "cq submit --after a failed job said: $said"
nocwd=$(cq submit -q --cwd /nonexistent/cq-test -- true)
wait_until 30 "the job without its directory fails" job_state_is "$nocwd" failed
cq show "$nocwd" | grep -q "said: launch failed: cwd /nonexistent/cq-test" ||
  fail "cq show does not say why the launch failed: $(cq show "$nocwd")"
cq events "$nocwd" | grep -q "failed .*launch failed: cwd /nonexistent/cq-test" ||
  fail "the failure's event does not say why: $(cq events "$nocwd")"
pass "an --after on a failed job is told at submit; a failed launch says why"

# A --node that has not joined: refused as a job no node could run (exit 2),
# queued for it with --hold-for-node (it was not_found either way).
EXPECT_RC=2 expect_refused "--node: no node named 'gpu-later' (--hold-for-node queues" submit --node gpu-later -- true
later=$(cq submit -q --hold-for-node --node gpu-later -- true)
[[ $(job_field "$later" state) == queued ]] || fail "the job for gpu-later is $(job_field "$later" state)"
cq show "$later" | grep -q "gpu-later: no node of that name has joined" || fail "why it waits: $(cq show "$later")"
cq cancel "$later" >/dev/null
pass "--node of a node yet to join: refused (exit 2), queued with --hold-for-node"
# cq logs -f of a job cancelled before it started says so (it exited 0,
# silently).
said=$(cq logs -f "$later" 2>&1) || fail "cq logs -f of a cancelled job exited $?: $said"
grep -q "was cancelled before it started, so it has no output" <<<"$said" || fail "cq logs -f: $said"

# --json takes --limit too: the first N jobs, and how many match in all
# (it printed every job).
limited=$(cq ls --all --json --limit 2)
[[ $(jq '.jobs | length' <<<"$limited") == 2 && $(jq .total <<<"$limited") -gt 2 ]] ||
  fail "cq ls --all --json --limit 2: $(jq -c '{n: (.jobs | length), total}' <<<"$limited")"
[[ $(jq -r '.jobs[0].id' <<<"$limited") == "$prep" ]] || fail "--json --limit 2 does not start at the first job"
pass "cq ls --json --limit N prints N jobs and the total"

# cq up without --port, after cq up --port N: the coordinator running at N
# is the one meant (it said it ran elsewhere and exited 5).
again=$(cq up 2>&1) || fail "cq up without --port exits $?: $again"
grep -q "coordinator: already running at tcp://127.0.0.1:$port" <<<"$again" ||
  fail "cq up without --port: $again"
expect_refused "already runs" up --port "$(free_port)"
down=$(cq down 2>&1)
grep -q "keep running" <<<"$down" || fail "cq down: $down"
# ... and after cq down, cq up without --port comes back on the port the
# state was started with, where its node was invited (it started the
# coordinator on 7800 and the node never came online).
back=$(cq up 2>&1) || fail "cq up after cq down exits $?: $back"
grep -q "tcp://127.0.0.1:$port" <<<"$back" || fail "cq up after cq down: $back"
[[ $(cq node ls --json | jq -r '.nodes[0].online') == true ]] || fail "the node is not online: $(cq node ls)"
cq down >/dev/null
pass "cq up without --port finds the running coordinator; on another port it says it runs elsewhere; cq down says jobs keep running"

