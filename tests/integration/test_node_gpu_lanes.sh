#!/usr/bin/env bash
# Lanes registered in node.toml ([[gpu.lanes]], SPEC section 5), with a real
# coordinator and two real cq-node daemons:
#  - n1 registers one lane "accel" with CUDA device index 5 and a uuid; its
#    nvidia-smi (the fake) lists two other GPUs: the node has exactly the
#    registered lane (detection is replaced), it takes that uuid's memory.used
#    from the telemetry, and a GPU job there sees CUDA_VISIBLE_DEVICES=5 (the
#    device index, not a number taken from the lane's name);
#  - n2 registers one unindexed lane "npu" and has no nvidia-smi at all: it
#    still has its lane, and a GPU job there runs with no CUDA_VISIBLE_DEVICES,
#    even when the submitter had one set.
source "$(dirname "$0")/lib.sh"
fake_smi=$(cd "$here/../fixtures" && pwd)/fake-nvidia-smi
start_coordinator

smi=$work/smi
mkdir -p "$smi"
export FAKE_NVIDIA_SMI_DIR=$smi
accel_uuid=GPU-55555555-1111-2222-3333-444444444444
cat >"$smi/gpus.csv" <<EOF
0, GPU-00000000-1111-2222-3333-444444444444, NVIDIA Fake 16GB, 16384, 0
5, $accel_uuid, NVIDIA Fake 24GB, 24576, 2048
EOF
: >"$smi/apps.csv"

start_node() { # NAME
  cq-node --state "$state/$1" --mem-total 8589934592 --mem-available 8589934592 --cpus 4 \
    >>"$state/node.log" 2>&1 &
  echo $! >"$state/$1.pid"
}
stop_node() { # NAME
  local pid
  pid=$(cat "$state/$1.pid")
  kill -TERM "$pid"
  local deadline=$((SECONDS + 10 * deadline_scale))
  until gone "$pid"; do
    ((SECONDS < deadline)) || fail "cq-node $1 did not stop on SIGTERM"
    sleep 0.05
  done
}
node_json() { cq node ls --json | jq -c --arg n "$1" '.nodes[] | select(.name == $n)'; }
node_online() { [[ $(node_json "$1" | jq -r .online) == true ]]; }
join_node() { # NAME: joins, is approved, stops (node.toml then gets its [gpu] table)
  local code
  code=$(cq node invite "$1")
  cq-node --join "$CQ_URL" "$code" "$1" --state "$state/$1" >>"$state/node.log" 2>&1 &
  echo $! >"$state/$1.pid"
  wait_until 10 "node $1 joins" bash -c "cq node ls --json | jq -e '.nodes[] | select(.name == \"$1\")'"
  cq node approve "$1" >/dev/null
  stop_node "$1"
}

join_node n1
cat >>"$state/n1/node.toml" <<EOF

[gpu]
nvidia_smi = "$fake_smi"
kernel_log = ""

[[gpu.lanes]]
name = "accel"
index = 5
uuid = "$accel_uuid"
vram_bytes = 25769803776
EOF
join_node n2
cat >>"$state/n2/node.toml" <<EOF

[gpu]
nvidia_smi = "$work/no-such-nvidia-smi"
kernel_log = ""

[[gpu.lanes]]
name = "npu"
vram_bytes = 8589934592
EOF
start_node n1
start_node n2
wait_until 10 "n1 is online" node_online n1
wait_until 10 "n2 is online" node_online n2

# ---- the lanes are the registered ones ----------------------------------------------
n1_lanes_ok() {
  node_json n1 | jq -e --arg u "$accel_uuid" '.lanes | length == 1
    and .[0].name == "accel" and .[0].index == 5 and .[0].uuid == $u
    and .[0].vram_total_bytes == 25769803776 and .[0].vram_used_bytes == 2147483648'
}
wait_until 10 "n1 reports its registered lane with telemetry" n1_lanes_ok
pass "n1 has exactly its registered lane accel (index 5), not nvidia-smi's gpu0/gpu5; memory.used by uuid"
n2_lanes_ok() {
  node_json n2 | jq -e '.lanes | length == 1 and .[0].name == "npu" and .[0].index == null
    and .[0].vram_total_bytes == 8589934592 and .[0].vram_used_bytes == 0'
}
wait_until 10 "n2 reports its registered lane" n2_lanes_ok
pass "n2 has its registered unindexed lane npu without any nvidia-smi"

# ---- CUDA_VISIBLE_DEVICES --------------------------------------------------------------
probe='echo "cvd=[${CUDA_VISIBLE_DEVICES-unset}]"'
j1=$(CUDA_VISIBLE_DEVICES=7 cq submit --name on-accel --node n1 --gpus 1 -- sh -c "$probe")
j2=$(CUDA_VISIBLE_DEVICES=7 cq submit --name on-npu --node n2 --gpus 1 -- sh -c "$probe")
wait_until 20 "the job on accel ends" bash -c "[[ \$(cq show $j1 --json | jq -r .job.state) =~ succeeded|failed ]]"
wait_until 20 "the job on npu ends" bash -c "[[ \$(cq show $j2 --json | jq -r .job.state) =~ succeeded|failed ]]"
[[ $(job_field "$j1" state) == succeeded ]] ||
  fail "the job on accel $(job_field "$j1" state) ($(job_field "$j1" reason)): $(cq logs "$j1")"
[[ $(job_field "$j1" 'lanes[0]') == accel ]] || fail "j1 holds $(job_field "$j1" lanes)"
cq logs "$j1" | grep -qx 'cvd=\[5\]' || fail "the job on lane accel saw: $(cq logs "$j1")"
pass "a GPU job on registered lane accel (index 5) sees CUDA_VISIBLE_DEVICES=5"
[[ $(job_field "$j2" state) == succeeded ]] ||
  fail "the job on npu $(job_field "$j2" state) ($(job_field "$j2" reason)): $(cq logs "$j2")"
[[ $(job_field "$j2" 'lanes[0]') == npu ]] || fail "j2 holds $(job_field "$j2" lanes)"
cq logs "$j2" | grep -qx 'cvd=\[unset\]' || fail "the job on lane npu saw: $(cq logs "$j2")"
pass "a GPU job on an unindexed registered lane runs without CUDA_VISIBLE_DEVICES (the submitter's 7 removed)"
stop_node n1
stop_node n2
