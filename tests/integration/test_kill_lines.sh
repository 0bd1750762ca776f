#!/usr/bin/env bash
# Issue 19, acceptance 6: every kill leaves one line in the job's output saying
# what killed it and why, after the job's own output: a RAM cap (oom), a
# --timeout, a cancel. (Preemption: test_lease_preemption.sh; a VRAM cap and a
# GPU fault: test_node_gpu.sh.) A job that just exits gets no such line.
source "$(dirname "$0")/lib.sh"
start_cq

hog=$(cq submit --ram 64M -- sh -c 'echo allocating; { head -c 268435456 /dev/zero; sleep 30; } | tail -c 268435456 >/dev/null')
slow=$(cq submit --timeout 1s -- sh -c 'echo started; exec sleep 60')
long=$(cq submit -- sh -c 'echo waiting; exec sleep 60')
plain=$(cq submit -- sh -c 'echo done; exit 3')
wait_until 30 "the long job runs" job_state_is "$long" running
wait_until 30 "the long job has written" bash -c "cq logs $long | grep -q waiting"
cq cancel "$long" >/dev/null
for j in "$hog" "$slow" "$long" "$plain"; do
  wait_until 60 "job $j ends" bash -c "[[ \$(cq show $j --json | jq -r .job.state) =~ ^(failed|cancelled|succeeded)$ ]]"
done

# expect JOB REASON PATTERN: the job ended with REASON and the last line of its
# output matches PATTERN (after what the job itself printed).
expect() {
  local out
  [[ $(job_field "$1" reason) == "$2" ]] || fail "job $1 ended with reason '$(job_field "$1" reason)', not $2"
  out=$(cq logs "$1")
  [[ $(tail -n 1 <<<"$out") =~ $3 ]] || fail "$2: the last line of the output is not a kill line: $out"
  [[ $(wc -l <<<"$out") -ge 2 ]] || fail "$2: the job's own output is gone: $out"
  pass "$2: $(tail -n 1 <<<"$out")"
}
expect "$hog" oom '^cq-node: killed: out of memory: .*RAM cap of 64 MiB'
expect "$slow" timeout '^cq-node: stopped: its --timeout of 1s ran out after'
expect "$long" cancelled '^cq-node: stopped by the coordinator: cancelled'
[[ $(cq logs "$plain") == done ]] || fail "a job that exited has more than its own output: $(cq logs "$plain")"
pass "a job that exited by itself has only its own output"
