#!/usr/bin/env bash
# Issue 19 ("keep a queued job from starting and let it go later"): cq hold
# keeps a queued job from starting even once it could; cq show and cq ls say
# so and how to let it go; cq release JOB lets it start; cq release still
# takes a node's hold with --hold, and refuses both at once.
source "$(dirname "$0")/lib.sh"
start_cq

gate=$work/gate
first=$(cq submit -q --name gate -- sh -c "while [ ! -e $gate ]; do sleep 0.05; done")
later=$(cq submit -q --name later --after "$first" -- true)
[[ $(cq hold later) == "$later on hold" ]] || fail "cq hold did not answer 'on hold'"
touch "$gate"
wait_until 30 "the gate succeeds" job_state_is "$first" succeeded
[[ $(job_field "$later" state) == queued && $(job_field "$later" on_hold) == true ]] ||
  fail "the held job is $(job_field "$later" state)"
shown=$(cq show later)
grep -q "on hold (cq release lets it start)" <<<"$shown" || fail "cq show: $shown"
grep -q "kept from starting by cq hold; cq release ${later:0:8}" <<<"$shown" ||
  fail "cq show does not say how to let it go: $shown"
grep -q "later .*queued .*on hold" <<<"$(COLUMNS=200 cq ls)" || fail "cq ls: $(cq ls)"
pass "a held job stays queued after its dependency succeeded, and says how to let it go"

[[ $(cq release later) == "$later released" ]] || fail "cq release JOB did not answer released"
wait_until 30 "the released job succeeds" job_state_is "$later" succeeded
set +e
out=$(cq hold "$later" 2>&1)
rc=$?
both=$(cq release "$later" --hold h-1 2>&1)
rc2=$?
set -e
[[ $rc == 5 && $out == *"cq hold keeps a queued job from starting"* ]] ||
  fail "cq hold of a finished job: exit $rc: $out"
set +e
rel=$(cq release "$later" 2>&1)
set -e
[[ $rel == *"cq release lets a held job start"* ]] || fail "cq release of a finished job: $rel"
[[ $rc2 == 2 && $both == *"one of the two"* ]] || fail "cq release JOB --hold ID: exit $rc2: $both"
pass "released, it ran; a finished job cannot be held; cq release takes jobs or --hold, not both"
