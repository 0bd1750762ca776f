#!/usr/bin/env bash
# Issue 21, acceptance 4: a status server bound off loopback answers 401 to the
# page, /api/state and /metrics without a token of cq, and serves them with
# one (the Authorization header, or the cookie /login sets); a revoked token no
# longer opens it. A bad --http is refused naming the flag. A flood of idle
# connections holds a bounded number of the coordinator's descriptors and
# leaves the coordinator answering.
source "$(dirname "$0")/lib.sh"
hp=$(free_port)
start_coordinator "$CQ_URL" --http "0.0.0.0:$hp"
base=http://127.0.0.1:$hp
for path in / /api/state /api/charts /metrics; do
  code=$(http_code "$base$path")
  [[ $code == 401 ]] || fail "GET $path without a token: $code, not 401"
done
http_get "$base/" | grep -q 'name="token"' || fail "the 401 page has no sign-in form"
pass "off loopback, no token: 401 everywhere, with a sign-in form"

[[ $(http_code "$base/metrics" -H "Authorization: Bearer cq_nottherealone") == 401 ]] ||
  fail "a wrong token opened /metrics"
owner=$(owner_token)
[[ $(http_code "$base/metrics" -H "Authorization: Bearer $owner") == 200 ]] || fail "the Owner's token is refused"
sub=$(cq token add visitor submitter | grep -o 'cq_[0-9a-f]*' | head -1)
[[ -n $sub ]] || fail "no submitter token"
[[ $(http_code "$base/api/state" -H "Authorization: Bearer $sub") == 200 ]] || fail "a submitter's token is refused"
pass "a token of any role opens the page (Owner, submitter)"

jar=$work/cookies
[[ $(http_code "$base/login" -c "$jar" --data-urlencode "token=$sub") == 303 ]] || fail "POST /login did not sign in"
grep -q cq_token "$jar" || fail "no cookie set: $(cat "$jar")"
[[ $(http_code "$base/" -b "$jar") == 200 ]] || fail "the cookie does not open the page"
[[ $(http_code "$base/login" --data-urlencode "token=cq_wrong") == 401 ]] || fail "a wrong token signed in"
pass "the login form sets a cookie that opens the page"

[[ $(http_code "$base/login" -H 'Transfer-Encoding: chunked' --data-binary @/etc/hostname) == 411 ]] ||
  fail "a chunked POST was read"
[[ $(http_code "$base/metrics" -d x=1) == 411 ]] || fail "a POST to /metrics was read"
[[ $(http_code "$base/" -X PUT) == 405 ]] || fail "PUT was not refused"
pass "no body is read but a sized POST /login (411), no method but GET, HEAD and POST (405)"

cq token revoke visitor >/dev/null
# A valid token is remembered for at most 10 s.
wait_until 15 "the revoked token is refused" bash -c \
  "[[ \$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer $sub' $base/metrics) == 401 ]]"
pass "a revoked token no longer opens it"

cpid=$(cat "$state/coordinator.pid")
fds() { ls "/proc/$cpid/fd" | wc -l; }
before=$(fds)
python3 -c '
import select, socket, sys, time
held = []
for _ in range(300):  # connects in flight at once, as a flood makes them
    s = socket.socket()
    s.setblocking(False)
    s.connect_ex(("127.0.0.1", int(sys.argv[1])))
    held.append(s)
deadline = time.time() + 5
pending = list(held)
while pending and time.time() < deadline:  # until each is made (or the kernel holds it back)
    _, ready, _ = select.select([], pending, [], 0.2)
    pending = [s for s in pending if s not in ready]
open(sys.argv[2], "w").write(str(len(held) - len(pending)))
time.sleep(600)
' "$hp" "$work/flooded" &
flood=$!
trap 'kill $flood 2>/dev/null || true; cleanup' EXIT
wait_until 30 "the flood's connections are made" test -s "$work/flooded"
during=$(fds)
cq node ls >/dev/null || fail "the coordinator does not answer during the flood"
kill $flood
((during - before <= 60)) || fail "300 idle connections took $((during - before)) descriptors (at most 60)"
pass "$(cat "$work/flooded") of 300 idle connections made; they took $((during - before)) of the coordinator's descriptors; it still answers"

set +e
out=$(cq-coordinator --state "$work/other" --bind "tcp://127.0.0.1:$(free_port)" --http nonsense 2>&1)
rc=$?
set -e
[[ $rc == 2 && $out == *"--http 'nonsense'"* ]] || fail "a bad --http: exit $rc: $out"
pass "a bad --http is refused naming the flag: $out"
