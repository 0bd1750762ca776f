#!/usr/bin/env bash
# Issue 10, acceptance 2, 4 and 7 through the real `cq` and cq-coordinator:
#  - the role matrix: every CLI operation as Owner, Operator, Submitter and
#    Node, with the exit codes of SPEC section 7 (0 ok, 3 not found, 4
#    permission denied, 5 conflict); own jobs against another identity's;
#  - --job-id and --operation-id: replay, conflict, a refusal stores nothing,
#    a replay after kill -9;
#  - token hygiene: tokens never in the database in clear, --add-token on the
#    host, a revoked token refused, a 0644 token file refused, an empty
#    CQ_CONFIG_DIR never falls back to another profile.
source "$(dirname "$0")/lib.sh"

# --add-token on the coordinator's host, before it starts (it holds the lock).
mkdir -p "$state" "$CQ_CONFIG_DIR"
cq-coordinator --state "$state/coordinator" --init-owner tester >"$CQ_CONFIG_DIR/token" 2>/dev/null
chmod 600 "$CQ_CONFIG_DIR/token"
opal=$(cq-coordinator --state "$state/coordinator" --add-token opal operator 2>/dev/null)
[[ $opal == cq_* ]] || fail "--add-token printed '$opal'"
set +e
out=$(cq-coordinator --state "$state/coordinator" --add-token opal submitter 2>&1)
rc=$?
set -e
[[ $rc == 2 && $out == *"already has a valid operator token"* ]] || fail "a second opal: $rc $out"
cq-coordinator --state "$state/coordinator" --bind "$CQ_URL" >>"$state/coordinator.log" 2>&1 &
echo $! >"$state/coordinator.pid"
wait_until 10 "the coordinator answers" cq node ls
owner=$(cat "$CQ_CONFIG_DIR/token")
sam=$(cq token add sam submitter)
pass "--add-token makes an operator on the host; cq token add a submitter"

# A node, so that node operations have a target and a node token exists.
code=$(cq node invite box)
cq-node --state "$work/node" --join "$CQ_URL" "$code" box >>"$work/node.log" 2>&1 &
echo $! >"$state/node.pid"
wait_until 10 "the node joined" bash -c "cq node ls --json | jq -e '.nodes | length == 1'"
cq node approve box >/dev/null
node_token=$(awk -F"[\"']" '/^token/ {print $2}' "$work/node/node.toml")
[[ $node_token == cq_* ]] || fail "no node token in node.toml"

# A profile per identity (each its own CQ_CONFIG_DIR).
for who in owner opal sam node_token; do
  mkdir -p "$work/p/$who"
  CQ_CONFIG_DIR=$work/p/$who cq login "$CQ_URL" "${!who}" >/dev/null 2>&1 || true
  [[ -s $work/p/$who/token ]] || fail "no profile for $who"
done
as() { CQ_CONFIG_DIR=$work/p/$1 "${@:2}"; }
# A queued job of `who` (it fits no node).
job_of() { as "$1" cq submit --json --hold-for-node --ram 512T -- true | jq -r .job.id; }

# expect ROLE RC CMD...: CMD run as ROLE exits RC.
cells=0
expect() {
  local who=$1 want=$2 rc
  shift 2
  set +e
  as "$who" "$@" >"$work/out" 2>&1
  rc=$?
  set -e
  [[ $rc == "$want" ]] || fail "$who: $* exited $rc, not $want: $(cat "$work/out")"
  cells=$((cells + 1))
}
n=0
for who in owner opal sam node_token; do
  # Expected exit per role, in the order owner opal sam node.
  pick() { case $who in owner) echo "$1" ;; opal) echo "$2" ;; sam) echo "$3" ;; *) echo "$4" ;; esac; }
  other=$(job_of "$([[ $who == sam ]] && echo opal || echo sam)")
  n=$((n + 1))
  expect $who "$(pick 0 0 0 4)" cq submit --hold-for-node --ram 512T -- true
  expect $who "$(pick 0 0 0 4)" cq ls
  expect $who "$(pick 0 0 0 4)" cq show "$other"
  expect $who "$(pick 0 0 0 4)" cq logs "$other"
  expect $who "$(pick 0 0 0 4)" cq events "$other"
  expect $who "$(pick 0 0 0 4)" cq profile ls
  expect $who "$(pick 0 0 0 4)" cq node ls
  expect $who "$(pick 5 4 4 4)" cq preempt "$other"
  expect $who "$(pick 0 4 4 4)" cq move "$other" --front
  expect $who "$(pick 0 4 4 4)" cq cancel "$other"
  if [[ $who == opal || $who == sam ]]; then # own jobs: allowed
    mine=$(job_of $who)
    expect $who 5 cq preempt "$mine" # allowed, but not running: invalid_state
    expect $who 0 cq move "$mine" --front
    expect $who 0 cq cancel "$mine"
  fi
  expect $who "$(pick 0 0 4 4)" cq node disable box --reason "matrix"
  expect $who "$(pick 0 0 4 4)" cq node enable box
  expect $who "$(pick 0 0 4 4)" cq audit
  expect $who "$(pick 3 4 4 4)" cq release --hold no-such-hold
  expect $who "$(pick 5 4 4 4)" cq node clear-fault box --reason "matrix"
  expect $who "$(pick 0 4 4 4)" cq node invite "spare$n"
  expect $who "$(pick 0 4 4 4)" cq node approve box
  expect $who "$(pick 5 4 4 4)" cq node diagnostic box "$other" --reason "matrix"
  expect $who "$(pick 0 4 4 4)" cq node diagnostic box
  expect $who "$(pick 0 4 4 4)" cq token add "t$n" submitter
  expect $who "$(pick 0 4 4 4)" cq token ls
  expect $who "$(pick 3 4 4 4)" cq token revoke nobody
done
pass "the role matrix: $cells cells through the CLI, each with its SPEC section 7 exit code"
[[ $(as owner cq show "$(job_of sam)" --json | jq -r .job.owner) == sam ]] ||
  fail "a job does not belong to the identity that submitted it"

# --operation-id: a replay returns the stored result and applies nothing.
a=$(job_of owner) b=$(job_of owner)
op=$(cat /proc/sys/kernel/random/uuid)
first=$(cq cancel "$a" --operation-id "$op" --json | jq -c .job)
again=$(cq cancel "$a" --operation-id "$op" --json | jq -c .job)
[[ $first == "$again" ]] || fail "the replay differs: $first vs $again"
expect owner 5 cq cancel "$b" --operation-id "$op"
grep -q operation_conflict "$work/out" || fail "not operation_conflict: $(cat "$work/out")"
[[ $(job_field "$b" state) == queued ]] || fail "the conflicting call cancelled $b"
# A refused request stores nothing: the same id then works for the Owner.
op2=$(cat /proc/sys/kernel/random/uuid)
expect sam 4 cq cancel "$b" --operation-id "$op2"
expect owner 0 cq cancel "$b" --operation-id "$op2"
[[ $(cq audit --json --target "$a" --op cancel | jq -r '.rows[-1].outcome') == replayed ]] ||
  fail "the replay is not audited as one"
pass "--operation-id: replay returns the stored result, other arguments are operation_conflict (5), a refusal stores nothing"

# --job-id: the same spec returns the stored job (terminal too); another spec conflicts.
jid=$(cat /proc/sys/kernel/random/uuid)
j1=$(cq submit --json --job-id "$jid" --hold-for-node --ram 512T -- echo hi | jq -r .job.id)
[[ $j1 == "$jid" ]] || fail "the job's id is $j1, not $jid"
cq cancel "$jid" >/dev/null
j2=$(cq submit --json --job-id "$jid" --hold-for-node --ram 512T -- echo hi | jq -r '.job.id + " " + .job.state')
[[ $j2 == "$jid cancelled" ]] || fail "the resubmit returned $j2"
expect owner 5 cq submit --job-id "$jid" --hold-for-node --ram 512T -- echo other
grep -q job_conflict "$work/out" || fail "not job_conflict: $(cat "$work/out")"
grep -q "(the command differs)" "$work/out" || fail "what differs is not said: $(cat "$work/out")"
expect owner 5 cq submit --job-id "$jid" --hold-for-node --ram 256T --cwd / -- echo hi
grep -q "(--cwd and --ram differ)" "$work/out" || fail "what differs is not said: $(cat "$work/out")"
# Nothing cq keeps differs: the environment does (a retry from another shell).
expect owner 5 env CQ_TEST_OTHER=1 cq submit --job-id "$jid" --hold-for-node --ram 512T -- echo hi
grep -q "so most likely the environment does" "$work/out" || fail "the environment is not named: $(cat "$work/out")"
pass "--job-id: the same spec returns the stored (terminal) job, another spec is job_conflict (5), saying what differs"

# A replay after kill -9: the stored result, nothing applied again.
c=$(job_of owner)
op3=$(cat /proc/sys/kernel/random/uuid)
moved=$(cq move "$c" --priority high --operation-id "$op3" --json | jq -c '.job | [.id, .priority]')
kill -9 "$(cat "$state/coordinator.pid")"
wait_until 10 "the coordinator is gone" gone "$(cat "$state/coordinator.pid")"
cq-coordinator --state "$state/coordinator" --bind "$CQ_URL" >>"$state/coordinator.log" 2>&1 &
echo $! >"$state/coordinator.pid"
wait_until 10 "the coordinator answers again" cq node ls
replayed=$(cq move "$c" --priority high --operation-id "$op3" --json | jq -c '.job | [.id, .priority]')
[[ $moved == "$replayed" ]] || fail "after kill -9 the replay gave $replayed, not $moved"
[[ $(cq audit --json --target "$c" --op move | jq '[.rows[] | select(.outcome == "replayed")] | length') == 1 ]] ||
  fail "the replay after the restart is not audited as one"
pass "a replay after kill -9 returns the stored result"

# Token hygiene.
for t in "$owner" "$opal" "$sam" "$node_token"; do
  for f in "$state"/coordinator/cq.db*; do
    ! grep -q -a -F "$t" "$f" || fail "a token is in $f in clear"
  done
done
pass "no token is in the database files in clear"
as owner cq token revoke sam >/dev/null
expect sam 4 cq ls
grep -q unauthenticated "$work/out" || fail "a revoked token: $(cat "$work/out")"
pass "a revoked token is refused on its next call (exit 4)"
chmod 644 "$work/p/opal/token"
expect opal 4 cq ls
grep -q "open to group or others" "$work/out" || fail "a 0644 token file: $(cat "$work/out")"
pass "a 0644 token file is refused (exit 4)"
mkdir -p "$work/p/empty"
expect empty 4 cq ls
grep -q "no token file at $work/p/empty/token" "$work/out" || fail "an empty profile: $(cat "$work/out")"
pass "an empty CQ_CONFIG_DIR does not fall back to another profile (exit 4)"

# A login that fails (a mistyped token) keeps the profile that worked, and
# saves none where there was none.
expect owner 4 cq login "$CQ_URL" cq_typo
grep -q "the profile as it was is kept" "$work/out" || fail "a failed login: $(cat "$work/out")"
expect owner 0 cq whoami
mkdir -p "$work/p/fresh"
expect fresh 4 cq login "$CQ_URL" cq_typo
[[ ! -e $work/p/fresh/token && ! -e $work/p/fresh/url ]] || fail "a failed login saved a profile"
# A first profile whose coordinator does not answer yet is saved, unchecked.
mkdir -p "$work/p/later"
expect later 1 env -u CQ_URL CQ_TIMEOUT_MS=500 cq login "tcp://127.0.0.1:$(free_port)" cq_later
grep -q "the profile is saved, unchecked" "$work/out" || fail "a login to nothing yet: $(cat "$work/out")"
[[ $(cat "$work/p/later/token") == cq_later ]] || fail "the first profile was not saved"
pass "a failed cq login keeps the profile as it was (exit 4); a first one, unanswered, is saved (exit 1)"
