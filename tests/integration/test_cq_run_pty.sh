#!/usr/bin/env bash
# Issue 19, acceptance 1 (--pty): `cq run --pty -- sh` driven through tmux. A
# command typed into it runs inside the job's allocation (its
# CQ_ALLOCATION_ID is the job's), the job's terminal has the window's size
# and follows a resize, Ctrl-C reaches the job (it interrupts the command,
# not the job), and exit ends the job, which succeeds.
source "$(dirname "$0")/lib.sh"
command -v tmux >/dev/null || { echo "skip: tmux is not installed (deploy/install-deps.sh)"; exit 77; }
start_cq

sock=$work/tmux.sock
tm() { tmux -S "$sock" "$@"; }
screen() { tm capture-pane -p -J -t cq -S -200; }
# screen_has REGEX: the pane shows a line matching it.
screen_has() { screen | grep -Eq -- "$1"; }

# The pane runs cq run and then says how it ended; the server is ended by
# its pid (cleanup kills every $state/*.pid).
tm -f /dev/null new-session -d -s cq -x 100 -y 30 \
  "cq run --pty -- sh 2>&1; echo cq-run-rc=\$?; exec sleep 600"
tm display-message -p '#{pid}' >"$state/tmux.pid"
wait_until 30 "the job starts and cq run hands the keys over" screen_has "started: keys go to it"
job=$(screen | sed -n 's/^cq: job \([0-9a-f-]\{36\}\): waiting to start.*/\1/p' | head -n 1)
[[ -n $job ]] || fail "no job id in the pane: $(screen)"

size() { tm display-message -p -t cq '#{pane_height} #{pane_width}'; }
tm send-keys -t cq 'echo "alloc=$CQ_ALLOCATION_ID"; echo "size=$(stty size)"' Enter
wait_until 20 "the typed command runs on the job's terminal" screen_has '^alloc=[0-9a-f-]{36}'
alloc=$(screen | sed -n 's/^alloc=\([0-9a-f-]\{36\}\).*/\1/p' | tail -n 1)
[[ $alloc == "$(job_field "$job" allocation)" ]] ||
  fail "the command ran in allocation '$alloc', the job's is $(job_field "$job" allocation)"
want=$(size)
wait_until 10 "stty size prints the window's size ($want)" screen_has "^size=$want\$"
pass "a typed command ran in the job's allocation $alloc; the terminal is $want like the pane"

tm resize-window -t cq -x 120 -y 40
want=$(size)
[[ $want == *" 120" ]] || fail "tmux did not resize the pane: $want"
tm send-keys -t cq 'echo "resized=$(stty size)"' Enter
wait_until 20 "the job's terminal follows the resize ($want)" screen_has "^resized=$want\$"
pass "after a resize the job's terminal is $want"

tm send-keys -t cq 'sleep 317' Enter
wait_until 20 "sleep runs in the job" pgrep -f "^sleep 317$"
tm send-keys -t cq C-c
wait_until 20 "Ctrl-C ends the job's sleep" bash -c '! pgrep -f "^sleep 317$"'
tm send-keys -t cq 'echo "alive=$((6 * 7))"' Enter
wait_until 20 "the shell answers after Ctrl-C" screen_has '^alive=42$'
[[ $(job_field "$job" state) == running ]] || fail "Ctrl-C ended the job: $(job_field "$job" state)"
pass "Ctrl-C interrupted the job's command, and the job's shell still runs"

tm send-keys -t cq 'exit' Enter
wait_until 30 "exit ends cq run" screen_has '^cq-run-rc=0$'
[[ $(job_field "$job" state) == succeeded ]] || fail "the job is $(job_field "$job" state)"
pass "exit ended the job (succeeded) and cq run (exit 0)"

# A cancel hangs up the job's terminal: its interactive shell (which
# ignores SIGTERM) ends at once, not when the grace period runs out.
sock=$work/tmux2.sock # a server of its own (the first one ends at cleanup)
tm -f /dev/null new-session -d -s cq -x 100 -y 30 \
  "cq run --pty -- sh 2>&1; echo cq-run-rc=\$?; exec sleep 600"
tm display-message -p '#{pid}' >"$state/tmux2.pid"
wait_until 30 "the second job starts" screen_has "started: keys go to it"
job=$(screen | sed -n 's/^cq: job \([0-9a-f-]\{36\}\): waiting to start.*/\1/p' | head -n 1)
tm send-keys -t cq 'echo "ready=$((2 + 3))"' Enter
wait_until 20 "its shell answers" screen_has '^ready=5$'
start=$SECONDS
cq cancel "$job" >/dev/null
wait_until 20 "cq run ends after the cancel" screen_has '^cq-run-rc=130$'
[[ $(job_field "$job" state) == cancelled ]] || fail "the job is $(job_field "$job" state)"
pass "cq cancel ended the --pty job's shell in $((SECONDS - start)) s; cq run exited 130"

# Not a terminal: refused at once, nothing submitted.
before=$(cq ls --all --json | jq '.jobs | length')
EXPECT_RC=2 expect_refused "standard input is not a terminal" run --pty -- sh </dev/null
[[ $(cq ls --all --json | jq '.jobs | length') == "$before" ]] || fail "a job was submitted"
