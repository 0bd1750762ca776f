# Shared helpers of the integration tests: a private HOME and config dir, a
# random loopback port, waiting on conditions with deadlines, and cleanup.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CQ_BIN=${CQ_BIN:-$here/../../build/bin}
export PATH="$CQ_BIN:$PATH"
work=$(mktemp -d /tmp/cq-it-XXXXXX)
export HOME=$work/home
export CQ_CONFIG_DIR=$HOME/.config/cq
mkdir -p "$HOME"
# A port below the kernel's ephemeral range (where the tests' own client
# connections take theirs, /proc/sys/net/ipv4/ip_local_port_range) on which
# nothing listens yet.
ephemeral_low=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
free_port() {
  local p
  for _ in $(seq 50); do
    p=$((10000 + RANDOM % (ephemeral_low - 10000)))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
  echo "$p"
}
port=$(free_port)
export CQ_URL=tcp://127.0.0.1:$port
state=$HOME/.local/share/cq
failures=0

# end_test_processes: kills, by pid, every process this test started that is
# still there: the daemons (their command line names a path under $work, as
# every state dir of a test is) and every process of a job its nodes ran
# (their environment names a state dir under $work), including those a killed
# node left running; then waits until they are gone.
end_test_processes() {
  local p pids=()
  for p in /proc/[0-9]*; do
    [[ ${p#/proc/} == "$$" || ${p#/proc/} == "$BASHPID" ]] && continue
    if grep -qaF "CQ_STATE_DIR=$work/" "$p/environ" 2>/dev/null ||
      { tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -qE "(^|/)cq-(node|coordinator) .*$work/"; }; then
      pids+=("${p#/proc/}")
    fi
  done
  ((${#pids[@]})) || return 0
  kill -9 "${pids[@]}" 2>/dev/null || true
  for p in "${pids[@]}"; do
    for _ in $(seq 100); do gone "$p" && break; sleep 0.1; done
  done
}

# remove_test_cgroups: removes the memory cgroups this test's nodes made
# (named cq-<start of the node's daemon.id>-<allocation>), for a node killed
# before its cleanup; a node started again removes its own.
remove_test_cgroups() {
  local idf id g
  while IFS= read -r idf; do
    id=$(head -c 12 "$idf")
    [[ $id =~ ^[0-9a-f]+$ ]] || continue
    while IFS= read -r g; do
      for _ in $(seq 50); do
        [[ -f $g/cgroup.procs ]] && xargs -r kill -9 <"$g/cgroup.procs" 2>/dev/null
        rmdir "$g" 2>/dev/null && break
        sleep 0.1
      done
    done < <(find /sys/fs/cgroup -maxdepth 7 -type d -name "cq-$id-*" 2>/dev/null)
  done < <(find "$work" -name daemon.id 2>/dev/null)
}

cleanup() {
  cq down >/dev/null 2>&1 || true
  for f in "$state"/*.pid; do [[ -f $f ]] && kill -9 "$(cat "$f")" 2>/dev/null || true; done
  end_test_processes
  remove_test_cgroups
  if [[ $failures -ne 0 || ${KEEP:-0} == 1 ]]; then
    echo "--- coordinator.log"; tail -n 40 "$state/coordinator.log" 2>/dev/null || true
    echo "--- node.log"; tail -n 40 "$state/node.log" 2>/dev/null || true
  fi
  [[ ${KEEP:-0} == 1 ]] || rm -rf "$work"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
  exit 1
}

pass() { echo "ok: $*"; }

# gone PID: the process has exited. A zombie counts as gone: kill -0 still
# succeeds on one, and PID 1 of some machines reaps orphans late. But only a
# zombie with no thread left: after kill -9 the main thread turns zombie
# first, while the others may still be exiting and holding the process's
# files (a coordinator's state-dir lock: a restart then found it taken).
gone() {
  [[ ! -e /proc/$1 ]] && return 0
  [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) == Z ]] || return 1
  local tasks=(/proc/"$1"/task/*)
  ((${#tasks[@]} <= 1)) || [[ ! -e /proc/$1 ]]
}
export -f gone

# Deadlines are written for an idle machine and multiplied by this scale
# (default 3), so that they hold on a slow machine running ctest -j2 beside
# another build. A deadline only bounds a wait: a passing test never waits
# it out, so a generous one costs nothing.
deadline_scale=${CQ_DEADLINE_SCALE:-3}

# wait_until SECONDS DESCRIPTION COMMAND...: polls COMMAND until it succeeds or
# the deadline (SECONDS times the scale) passes.
wait_until() {
  local limit=$(($1 * deadline_scale)) what=$2
  shift 2
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || fail "timed out after ${limit}s waiting until $what"
    sleep 0.1
  done
}

# expect_refused PATTERN CQ-ARGS...: cq fails with PATTERN in what it prints
# (stdout and stderr); with EXPECT_RC set, with exactly that exit code.
expect_refused() {
  local pattern=$1 out rc
  shift
  set +e
  out=$(cq "$@" 2>&1)
  rc=$?
  set -e
  [[ $rc != 0 && (-z ${EXPECT_RC:-} || $rc == "$EXPECT_RC") && $out == *"$pattern"* ]] ||
    fail "cq $*: exit $rc: $out"
  pass "cq $*: $out"
}

# job_field JOB FIELD: one field of `cq show --json`.
job_field() { cq show "$1" --json | jq -r ".job.$2"; }

job_state_is() { [[ $(job_field "$1" state) == "$2" ]]; }

# node_platform: the platform layer the tests' nodes run (cq-node --platform,
# from CQ_NODE_PLATFORM: ctest runs the node's tests once per platform).
node_platform() { echo "${CQ_NODE_PLATFORM:-linux}"; }

start_cq() {
  cq up --port "$port" >"$work/up.log" 2>&1 || { cat "$work/up.log"; fail "cq up failed"; }
}

# The Owner token that cq up wrote.
owner_token() { cat "$CQ_CONFIG_DIR/token"; }

# rss_kb PID: resident memory of a process, in KiB.
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

# needs_root WHAT: skip the test (ctest exit code 77) unless running as root.
needs_root() {
  if [[ $(id -u) != 0 ]]; then
    echo "skip: $* (needs root)"
    exit 77
  fi
}

# start_coordinator [BIND [FLAGS...]]: a coordinator of our own (not cq up)
# with an Owner whose token goes to the config dir; waits until it answers on
# CQ_URL. FLAGS go to cq-coordinator as they are.
start_coordinator() {
  mkdir -p "$state" "$CQ_CONFIG_DIR"
  cq-coordinator --state "$state/coordinator" --init-owner tester >"$CQ_CONFIG_DIR/token" 2>/dev/null
  chmod 600 "$CQ_CONFIG_DIR/token"
  cq-coordinator --state "$state/coordinator" --bind "${1:-$CQ_URL}" "${@:2}" \
    >>"$state/coordinator.log" 2>&1 &
  echo $! >"$state/coordinator.pid"
  wait_until 10 "the coordinator answers" cq node ls
}

# kill_node: kill -9 the node daemon cq up started, and wait until it is gone.
kill_node() {
  local pid
  pid=$(cat "$state/node.pid")
  kill -9 "$pid"
  wait_until 10 "cq-node is gone" gone "$pid"
}

# join_node NAME [CQ-NODE FLAGS...]: a node of our own (beside start_coordinator)
# joins with an invite, is approved, and is online; its pid in $state/node.pid.
join_node() {
  local name=$1 code
  shift
  code=$(cq node invite "$name")
  cq-node --join "$CQ_URL" "$code" "$name" --state "$state/$name" "$@" >>"$state/node.log" 2>&1 &
  echo $! >"$state/node.pid"
  wait_until 10 "node $name joins" bash -c "cq node ls --json | jq -e '.nodes[] | select(.name == \"$name\")'"
  cq node approve "$name" >/dev/null
  wait_until 10 "node $name is online" bash -c \
    "cq node ls --json | jq -e '.nodes[] | select(.name == \"$name\") | .online == true'"
}

# http_get URL [CURL ARGS...]: the body of a GET (curl fails on no answer).
http_get() { curl -sS --max-time 10 "$@"; }
# http_code URL [CURL ARGS...]: only the status code of a GET.
http_code() { curl -sS --max-time 10 -o /dev/null -w '%{http_code}' "$@"; }
