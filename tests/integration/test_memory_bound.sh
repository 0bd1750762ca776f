#!/usr/bin/env bash
# SPEC section 11's memory bound, as a bound (not a time): a coordinator
# holding 10,000 queued jobs that carry a 3 KB environment each stays under
# 50 MB of RSS once it has returned its free memory (every 2 s,
# docs/adr/0033), and so does the same coordinator restarted on them, and
# once they have all ended (cancelled, each by its own operation id, which
# is kept for a day), and restarted again.
source "$(dirname "$0")/lib.sh"
bound_kb=$((50 * 1024))
start_coordinator
pid=$(cat "$state/coordinator.pid")
acked=$(cq-test-load submit-big "$CQ_URL" "$(owner_token)" 10000 3000 | grep -c '^ok$' || true)
[[ $acked == 10000 ]] || fail "only $acked of 10000 submits were acknowledged"
under_bound() { (($(rss_kb "$1") <= bound_kb)); }
wait_until 30 "the coordinator's RSS with 10,000 queued jobs is at most 50 MB" under_bound "$pid"
under_bound "$pid" || fail "RSS with 10,000 queued jobs: $(rss_kb "$pid") KiB (bound $bound_kb)"
pass "10,000 queued jobs with a 3 KB environment: RSS $(rss_kb "$pid") KiB <= 50 MB"

# restart: kills the coordinator and starts it again on the same state.
restart() {
  kill -9 "$pid"
  wait_until 10 "the coordinator is gone" gone "$pid"
  cq-coordinator --state "$state/coordinator" --bind "$CQ_URL" >>"$state/coordinator.log" 2>&1 &
  pid=$!
  echo "$pid" >"$state/coordinator.pid"
  wait_until 60 "the restarted coordinator answers" cq node ls
}
restart
[[ $(cq ls --json | jq '.jobs | length') == 10000 ]] || fail "the restart did not keep the 10,000 jobs"
wait_until 30 "the restarted coordinator's RSS is at most 50 MB" under_bound "$pid"
under_bound "$pid" || fail "RSS after the restart: $(rss_kb "$pid") KiB (bound $bound_kb)"
pass "after a restart on them: RSS $(rss_kb "$pid") KiB <= 50 MB"

# `cq ls` asks the scheduler why the first queued jobs wait: that costs the
# coordinator one listing page, not a copy of the page per reason asked
# (which took 700 MB for 10,000 jobs). RSS right after three listings,
# before the coordinator returns its free memory.
for _ in 1 2 3; do
  cq ls >/dev/null || fail "cq ls of the 10,000 jobs failed"
done
rss=$(rss_kb "$pid")
((rss <= 2 * bound_kb)) ||
  fail "RSS right after three listings of 10,000 jobs: $rss KiB (at most $((2 * bound_kb)))"
pass "three listings of 10,000 jobs with their reasons: RSS $rss KiB right after"

# Ended, they stay under the bound: the api keeps each cancel's operation id
# and digest for its window, and the store its reply (which memory held
# before: 47.6 MB here).
cq cancel --mine --state queued >/dev/null || fail "cq cancel --mine --state queued failed"
left=$(cq ls --json --state queued | jq '.jobs | length')
[[ $left == 0 ]] || fail "$left jobs are still queued after cq cancel"
wait_until 30 "the coordinator's RSS with 10,000 cancelled jobs is at most 50 MB" under_bound "$pid"
under_bound "$pid" || fail "RSS with 10,000 cancelled jobs: $(rss_kb "$pid") KiB (bound $bound_kb)"
pass "10,000 jobs cancelled by 10,000 operation ids: RSS $(rss_kb "$pid") KiB <= 50 MB"
restart
[[ $(cq ls --json --all --state cancelled | jq '.jobs | length') == 10000 ]] ||
  fail "the restart did not keep the 10,000 cancelled jobs"
wait_until 30 "the restarted coordinator's RSS is at most 50 MB" under_bound "$pid"
under_bound "$pid" || fail "RSS after a restart on them: $(rss_kb "$pid") KiB (bound $bound_kb)"
pass "after a restart on 10,000 cancelled jobs: RSS $(rss_kb "$pid") KiB <= 50 MB"
