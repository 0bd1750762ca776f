#!/usr/bin/env bash
# Issue 10, acceptance 1 (SPEC section 6): two network namespaces joined by a
# veth pair this test makes, with traffic only between them. The coordinator
# binds the veth address in one (so CurveZMQ), a node joins from the other
# with nothing but an invite code, and a job runs there. A capture on the
# veth does not contain a marker from the job's argv; the same job over plain
# loopback does. A node token replayed from another CURVE key is refused.
source "$(dirname "$0")/lib.sh"
needs_root "network namespaces"
command -v tcpdump >/dev/null || { echo "skip: tcpdump is not installed"; exit 77; }
command -v ip >/dev/null || { echo "skip: iproute2 is not installed"; exit 77; }

unset CQ_URL # each case's profile (cq login) names its coordinator
a=cqa$$ b=cqb$$
net=10.$((RANDOM % 200 + 20)).$((RANDOM % 250)).
# Every process this test started in a namespace is ended by its pid: those
# recorded (daemons are started by `ip netns exec`, which execs them, so $! is
# the daemon's own pid) and any other the kernel still lists in the namespace.
ns_cleanup() {
  local pids
  for p in "$work"/*.pid; do [[ -f $p ]] && kill -9 "$(cat "$p")" 2>/dev/null || true; done
  for n in "$a" "$b"; do
    pids=$(ip netns pids "$n" 2>/dev/null || true)
    [[ -n $pids ]] && kill -9 $pids 2>/dev/null || true
  done
  for n in "$a" "$b"; do
    for _ in $(seq 100); do # up to 10 s for the kernel to reap them
      [[ -z $(ip netns pids "$n" 2>/dev/null || true) ]] && break
      sleep 0.1
    done
    ip netns del "$n" 2>/dev/null || true
  done
}
trap 'ns_cleanup; cleanup' EXIT
ip netns add "$a" && ip netns add "$b" || { echo "skip: cannot create network namespaces"; exit 77; }
ip link add "va$$" netns "$a" type veth peer name "vb$$" netns "$b"
ip -n "$a" addr add "${net}1/30" dev "va$$"
ip -n "$b" addr add "${net}2/30" dev "vb$$"
for n in "$a" "$b"; do ip -n "$n" link set lo up; done
ip -n "$a" link set "va$$" up
ip -n "$b" link set "vb$$" up
in_a() { ip netns exec "$a" "$@"; }
in_b() { ip netns exec "$b" "$@"; }
export -f in_a in_b
export a b
# A connection refused from A's address (no ping here): the pair passes traffic.
veth_up() {
  local out
  out=$(in_b timeout 2 bash -c "exec 3<>/dev/tcp/${net}1/9" 2>&1 || true)
  [[ $out == *refused* ]]
}
wait_until 10 "the veth pair passes traffic" veth_up

marker="cq-marker-$RANDOM$RANDOM"
# Runs one coordinator (in namespace A, on BIND) and one node (in NODE_NS),
# captures on IFACE in CAPTURE_NS while a job with the marker runs, and
# prints how many captured packets held the marker.
run_case() { # NAME BIND IFACE CAPTURE_NS NODE_NS
  local name=$1 bind=$2 iface=$3 cap_ns=$4 node_ns=$5
  local st=$work/$name cfg=$work/$name/cli
  mkdir -p "$st" "$cfg"
  export CQ_CONFIG_DIR=$cfg
  in_a cq-coordinator --state "$st/coord" --init-owner tester >"$cfg/token.new" 2>/dev/null
  local key=""
  [[ $bind == 127.* ]] || key=$(cq-coordinator --state "$st/coord" --show-key)
  ip netns exec "$a" cq-coordinator --state "$st/coord" --bind "$bind" --node-timeout 30s \
    >>"$st/coordinator.log" 2>&1 &
  echo $! >"$work/$name-coord.pid"
  in_a cq login "$bind" "$(cat "$cfg/token.new")" ${key:+--server-key "$key"} >/dev/null 2>&1 ||
    true # the coordinator may not answer yet: a first profile is saved, unchecked
  rm -f "$cfg/token.new"
  wait_until 10 "the $name coordinator answers" in_a cq node ls
  ip netns exec "$cap_ns" tcpdump -Z root --immediate-mode -i "$iface" -U -w "$st/capture.pcap" "tcp port ${bind##*:}" \
    >"$st/tcpdump.log" 2>&1 &
  echo $! >"$work/$name-tcpdump.pid"
  wait_until 10 "tcpdump listens on $iface" grep -q "listening on" "$st/tcpdump.log"
  local code
  code=$(in_a cq node invite "node-$name")
  ip netns exec "$node_ns" cq-node --state "$st/node" --join "$code" "node-$name" \
    >>"$st/node.log" 2>&1 &
  echo $! >"$work/$name-node.pid"
  wait_until 10 "node-$name joined" bash -c "in_a cq node ls --json | jq -e '.nodes | length == 1'"
  in_a cq node approve "node-$name" >/dev/null
  local job
  job=$(in_a cq submit --json -- echo "$marker" | jq -r .job.id)
  wait_until 20 "the $name job succeeded" bash -c \
    "in_a cq show $job --json | jq -e '.job.state == \"succeeded\"'"
  [[ $(in_a cq logs "$job") == "$marker" ]] || fail "$name: the job's output is not the marker"
  [[ $(in_a cq show "$job" --json | jq -r .job.node) == "node-$name" ]] ||
    fail "$name: the job did not run on node-$name"
  # Every packet is written as it comes (-U): wait until the job's are there.
  wait_until 10 "the capture holds the traffic" bash -c "(( \$(stat -c %s '$st/capture.pcap') > 4000 ))"
  kill "$(cat "$work/$name-tcpdump.pid")"
  wait_until 10 "tcpdump wrote its capture" gone "$(cat "$work/$name-tcpdump.pid")"
  [[ -s $st/capture.pcap ]] || fail "$name: empty capture"
  grep -c -a -F "$marker" "$st/capture.pcap" || true
}

# CURVE across the veth: the node in B joins the coordinator in A.
hits=$(run_case curve "${net}1:$port" "va$$" "$a" "$b" | tail -1)
[[ $hits == 0 ]] || fail "the marker crossed the veth in clear text ($hits packets)"
packets=$(tcpdump -Z root -r "$work/curve/capture.pcap" 2>/dev/null | wc -l)
((packets > 10)) || fail "the capture holds only $packets packets: it saw no traffic"
pass "a node in another namespace joined with an invite code and ran the job; $packets packets on the veth, none with the marker"

# The node's token from another CURVE key (its node.toml copied to a new
# state dir, which makes a new keypair) is refused, and the refusal audited.
mkdir -p "$work/thief"
cp "$work/curve/node/node.toml" "$work/thief/node.toml"
export CQ_CONFIG_DIR=$work/curve/cli
ip netns exec "$b" cq-node --state "$work/thief" >>"$work/thief/node.log" 2>&1 &
echo $! >"$work/thief.pid"
wait_until 15 "the replayed token is refused" bash -c \
  "in_a cq audit --json --op heartbeat | jq -e '[.rows[] | select(.who == \"node-curve\" and .outcome == \"permission_denied\")] | length > 0'"
grep -q "another CURVE key" "$work/thief/node.log" || {
  tail -5 "$work/thief/node.log"
  fail "the thief's log does not say why it was refused"
}
[[ $(in_a cq node ls --json | jq -r '.nodes[0].online') == true ]] ||
  fail "the real node went offline"
pass "the node token replayed from another CURVE key is refused and audited; the real node stays online"
for p in thief curve-node curve-coord; do
  pid=$(cat "$work/$p.pid")
  kill -9 "$pid"
  wait_until 10 "$p (pid $pid) is gone" gone "$pid"
done

# The same job over plain loopback (coordinator and node both in A): the
# marker is there in the capture.
port2=$(free_port)
hits=$(run_case plain "127.0.0.1:$port2" lo "$a" "$a" | tail -1)
((hits > 0)) || fail "over plain loopback the capture does not show the marker: the check is blind"
pass "over plain loopback the same job's marker is in $hits captured packets"
