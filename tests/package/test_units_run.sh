#!/usr/bin/env bash
# The units' ExecStart= lines, as the package writes them, run without
# systemd (this machine's init is not systemd) from the unpacked package, with
# /usr and /var/lib under a temporary root: `cq-coordinator install` makes the
# Owner; the coordinator starts and tells its readiness the way Type=notify
# expects; a node joins through `cq-node install`'s code path and runs under
# its unit's line; a job runs on it.
source "$(dirname "$0")/lib.sh"
needs_root "the node daemon's memory cgroups"
command -v python3 >/dev/null || { echo "skip: no python3 (deploy/install-deps.sh installs it)"; exit 77; }
units=$root/usr/lib/systemd/system
var=$root/var/lib
mkdir -p "$var"

# exec_start UNIT OPTS: the unit's ExecStart line with the package's paths
# under $root and $CQ_*_OPTS given as an EnvironmentFile= would.
exec_start() {
  local line
  line=$(sed -n 's/^ExecStart=//p' "$units/$1")
  [[ -n $line ]] || fail "$1 has no ExecStart="
  line=${line//\/usr\/bin\//$root/usr/bin/}
  line=${line//\/var\/lib\//$var/}
  # RuntimeDirectory= (/run/cq-coordinator), as systemd would make it.
  line=${line//\/run\//$root/run/}
  line=${line//\$CQ_COORDINATOR_OPTS/$2}
  line=${line//\$CQ_NODE_OPTS/$2}
  echo "$line"
}

# 1. The coordinator host: install (without systemd) makes the Owner.
"$root/usr/bin/cq-coordinator" install --owner alice --no-start --state "$var/cq-coordinator" \
  --bind "$CQ_URL" --advertise "127.0.0.1:$port" >"$work/owner.token" 2>"$work/install.err" ||
  { cat "$work/install.err"; fail "cq-coordinator install failed"; }
grep -q "cq node invite NAME" "$work/install.err" || fail "install does not say how to add machines"
grep -q "cq token add NAME" "$work/install.err" || fail "install does not say how to add people"
mkdir -p "$CQ_CONFIG_DIR"
install -m 600 "$work/owner.token" "$CQ_CONFIG_DIR/token"
pass "cq-coordinator install made the Owner"

# 2. cq-coordinator.service's line, with a NOTIFY_SOCKET as systemd gives it.
coordinator_line=$(exec_start cq-coordinator.service "--bind $CQ_URL --advertise 127.0.0.1:$port")
[[ $coordinator_line == "$root/usr/bin/cq-coordinator --state $var/cq-coordinator "*"--bind"* &&
  $coordinator_line == *"--local-socket $root/run/cq-coordinator/cq.sock"* ]] ||
  fail "unexpected ExecStart: $coordinator_line"
mkdir -p "$root/run/cq-coordinator"
notify=$work/notify.sock
python3 - "$notify" >"$work/notify.out" 2>&1 <<'PY' &
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
s.settimeout(120)
while True:
    msg = s.recv(4096).decode()
    print(msg.replace("\n", " "), flush=True)
    if "READY=1" in msg:
        break
PY
listener=$!
trap 'kill "$listener" 2>/dev/null || true; cleanup' EXIT
wait_until 10 "the notify socket exists" test -S "$notify"
NOTIFY_SOCKET=$notify bash -c "exec $coordinator_line" >>"$work/coordinator.log" 2>&1 &
echo $! >"$work/coordinator.pid"
wait_until 20 "the coordinator tells systemd it is ready" grep -q "READY=1" "$work/notify.out"
grep -q "STATUS=serving on" "$work/notify.out" || fail "no STATUS line: $(cat "$work/notify.out")"
[[ -S $root/run/cq-coordinator/cq.sock ]] || fail "the service serves no local socket"
cq node ls >/dev/null || fail "READY=1 was sent before the coordinator served"
pass "the coordinator serves under its unit's line and said READY=1 ($(cat "$work/notify.out"))"

# 3. A node joins through cq-node install's code path and runs under its unit's line.
code=$(cq node invite n1)
"$root/usr/bin/cq-node" install --no-start --state "$var/cq-node" "$code" n1 >"$work/node-install.out" 2>&1 ||
  { cat "$work/node-install.out"; fail "cq-node install --no-start failed"; }
[[ $(stat -c %a "$var/cq-node/node.toml") == 600 ]] || fail "node.toml is not 0600"
[[ $(stat -c %a "$var/cq-node") == 700 ]] || fail "the node's state dir is not 0700"
node_line=$(exec_start cq-node.service "--heartbeat-ms 200")
bash -c "exec $node_line" >>"$work/node.log" 2>&1 &
echo $! >"$work/node.pid"
wait_until 20 "the node says it waits for approval" grep -qx "pending approval" "$var/cq-node/status"
cq node approve n1 >/dev/null
wait_until 20 "the node says it is approved" grep -qx "approved" "$var/cq-node/status"
pass "cq-node install joined n1; under its unit's line it is online"

# 4. A job runs there.
job=$(cq submit --ram 64M -- sh -c 'echo packaged-hello')
wait_until 30 "the job succeeds" job_state_is "$job" succeeded
cq logs "$job" | grep -q packaged-hello || fail "the job's output is not in its log"
pass "a job ran on the packaged node"

# 5. An upgrade restarts both services (postinst's try-restart): with
# KillMode=process only the node daemon gets SIGTERM; its running job lives
# on, and the next daemon (under the same unit line) re-adopts it. The
# coordinator restarts on its state.
job=$(cq submit --ram 64M -- sh -c "while [ ! -e $work/go ]; do sleep 0.05; done; echo after-upgrade")
wait_until 30 "the job runs" job_state_is "$job" running
job_pid=$(pgrep -f "while \\[ ! -e $work/go" | head -1)
[[ -n $job_pid ]] || fail "the job's process is not found"
kill -TERM "$(cat "$work/node.pid")"
wait_until 20 "the node daemon exits" gone "$(cat "$work/node.pid")"
kill -TERM "$(cat "$work/coordinator.pid")"
wait_until 20 "the coordinator exits" gone "$(cat "$work/coordinator.pid")"
! gone "$job_pid" || fail "the job died with its daemon"
bash -c "exec $coordinator_line" >>"$work/coordinator.log" 2>&1 &
echo $! >"$work/coordinator.pid"
bash -c "exec $node_line" >>"$work/node.log" 2>&1 &
echo $! >"$work/node.pid"
wait_until 20 "the restarted coordinator serves" cq node ls
touch "$work/go"
wait_until 30 "the re-adopted job succeeds" job_state_is "$job" succeeded
cq logs "$job" | grep -q after-upgrade || fail "the re-adopted job's output is lost"
pass "both services restarted as an upgrade does; the running job was re-adopted and finished"

# 6. cq-node uninstall (without systemd) forgets the identity.
kill -TERM "$(cat "$work/node.pid")"
wait_until 20 "the node daemon exits" gone "$(cat "$work/node.pid")"
"$root/usr/bin/cq-node" uninstall --state "$var/cq-node" >"$work/uninstall.out" 2>&1 ||
  { cat "$work/uninstall.out"; fail "cq-node uninstall failed"; }
[[ ! -e $var/cq-node/node.toml ]] || fail "uninstall left node.toml"
pass "cq-node uninstall removed the identity"
kill "$listener" 2>/dev/null || true
