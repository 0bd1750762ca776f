#!/usr/bin/env bash
# Issue 4, acceptance 3 and 4: GPUs through a fake nvidia-smi and a fake kernel
# log, with a real coordinator and a real cq-node.
#  - two GPUs are detected as lanes gpu0 and gpu1;
#  - each GPU job gets CUDA_VISIBLE_DEVICES for its own lane; two GPU jobs on
#    one node get different lanes; the first lock path is held while they run;
#  - a process outside cq on a GPU is reported; a busy lock probe is reported;
#  - a job over its VRAM cap is stopped (reason vram_cap);
#  - an Xid 79 line in the kernel log latches a fault: the running GPU job is
#    stopped (its allocation ends with reason fault and the job goes back to the
#    queue), a new GPU job is not placed, a CPU job still runs; the latch survives
#    a node restart; `cq node clear-fault` by the Owner clears it (archived, not
#    deleted) and the GPU jobs run.
source "$(dirname "$0")/lib.sh"
# Background helpers die with the test (they would hold its output open).
helpers=()
trap 'kill "${helpers[@]}" 2>/dev/null || true; cleanup' EXIT
fake_smi=$(cd "$here/../fixtures" && pwd)/fake-nvidia-smi
start_coordinator

# ---- the fake GPU world -------------------------------------------------------
smi=$work/smi
mkdir -p "$smi"
export FAKE_NVIDIA_SMI_DIR=$smi
uuid0=GPU-00000000-1111-2222-3333-444444444444
uuid1=GPU-11111111-1111-2222-3333-444444444444
cat >"$smi/gpus.csv" <<EOF
0, $uuid0, NVIDIA Fake 16GB, 16384, 0
1, $uuid1, NVIDIA Fake 16GB, 16384, 0
EOF
: >"$smi/apps.csv"
klog=$work/kern.log
: >"$klog"
lock=$work/cq-gpu.lock
probe=$work/legacy-gpu.lock
node_dir=$state/g1

start_node() {
  cq-node --state "$node_dir" --mem-total 8589934592 --mem-available 8589934592 --cpus 4 \
    >>"$state/node.log" 2>&1 &
  echo $! >"$state/node.pid"
}
stop_node() {
  local pid
  pid=$(cat "$state/node.pid")
  kill -TERM "$pid"
  local deadline=$((SECONDS + 10 * deadline_scale))
  until gone "$pid"; do
    ((SECONDS < deadline)) || fail "cq-node did not stop on SIGTERM"
    sleep 0.05
  done
}
node_json() { cq node ls --json | jq -c '.nodes[] | select(.name == "g1")'; }
node_online() { [[ $(node_json | jq -r .online) == true ]]; }

code=$(cq node invite g1)
cq-node --join "$CQ_URL" "$code" g1 --state "$node_dir" >"$state/node.log" 2>&1 &
echo $! >"$state/node.pid"
wait_until 10 "node g1 joins" bash -c "cq node ls --json | jq -e '.nodes[] | select(.name == \"g1\")'"
cq node approve g1 >/dev/null
# [gpu] goes into node.toml after the join (which writes the identity), then a restart.
stop_node
cat >>"$node_dir/node.toml" <<EOF

[gpu]
nvidia_smi = "$fake_smi"
lock_paths = ["$lock", "$probe"]
kernel_log = "$klog"
EOF
start_node
wait_until 10 "g1 is online" node_online

# ---- lanes ------------------------------------------------------------------------
lanes_ok() {
  node_json | jq -e --arg u0 "$uuid0" --arg u1 "$uuid1" '.lanes | length == 2
    and .[0].name == "gpu0" and .[0].index == 0 and .[0].uuid == $u0
    and .[1].name == "gpu1" and .[1].index == 1 and .[1].uuid == $u1
    and .[0].vram_total_bytes == 17179869184'
}
wait_until 10 "two lanes are reported" lanes_ok
pass "two GPUs detected as lanes gpu0 and gpu1 (index, uuid, 16 GiB)"

# ---- two GPU jobs, CUDA_VISIBLE_DEVICES, the lock ------------------------------------
gate=$work/gate
out=$work/out
mkdir -p "$gate" "$out"
gpu_job() { # NAME: writes its CUDA_VISIBLE_DEVICES and pid, then waits for its gate
  echo "echo \"\$CUDA_VISIBLE_DEVICES\" >$out/$1.cvd; echo \$\$ >$out/$1.pid.tmp; mv $out/$1.pid.tmp $out/$1.pid; while [ ! -f $gate/$1 ] && [ -d $gate ]; do sleep 0.05; done"
}
j1=$(cq submit --name j1 --gpus 1 --vram 1G -- sh -c "$(gpu_job j1)")
j2=$(cq submit --name j2 --gpus 1 -- sh -c "$(gpu_job j2)")
wait_until 20 "both GPU jobs run" bash -c "[[ -f $out/j1.pid && -f $out/j2.pid ]]"
cvd1=$(cat "$out/j1.cvd")
cvd2=$(cat "$out/j2.cvd")
[[ $cvd1 =~ ^[01]$ && $cvd2 =~ ^[01]$ ]] || fail "CUDA_VISIBLE_DEVICES were '$cvd1' and '$cvd2'"
[[ $cvd1 != "$cvd2" ]] || fail "both GPU jobs got device $cvd1"
[[ $(job_field "$j1" 'lanes[0]') == "gpu$cvd1" ]] || fail "j1 holds $(job_field "$j1" lanes) but saw $cvd1"
[[ $(job_field "$j2" 'lanes[0]') == "gpu$cvd2" ]] || fail "j2 holds $(job_field "$j2" lanes) but saw $cvd2"
pass "two GPU jobs on one node got different lanes (CUDA_VISIBLE_DEVICES $cvd1 and $cvd2)"
cpu=$(cq submit --name cpu0 -- sh -c 'echo "cvd=[${CUDA_VISIBLE_DEVICES-unset}]"')
wait_until 20 "the CPU job finishes" job_state_is "$cpu" succeeded
cq logs "$cpu" | grep -q 'cvd=\[unset\]' || fail "a CPU job saw CUDA_VISIBLE_DEVICES: $(cq logs "$cpu")"
pass "a job without GPUs runs without CUDA_VISIBLE_DEVICES"
if flock -n "$lock" true; then fail "the first lock path is not held while GPU jobs run"; fi
pass "the first GPU lock path is held while GPU jobs run"

# ---- outside processes and lock probes --------------------------------------------------
sleep 300 >/dev/null 2>&1 &
outside=$!
helpers+=("$outside")
uuid_of() { if [[ $1 == 0 ]]; then echo "$uuid0"; else echo "$uuid1"; fi; }
echo "$outside, $uuid1, 512" >"$smi/apps.csv"
wait_until 10 "the outside process is reported" bash -c \
  "cq node ls --json | jq -e '.nodes[0].outside_gpu_processes | any(.pid == $outside and .lane == \"gpu1\" and .vram_bytes == 536870912)'"
wait_until 10 "gpu1 reports the outside VRAM" bash -c \
  "cq node ls --json | jq -e '.nodes[0].lanes[1].vram_outside_bytes == 536870912'"
pass "a GPU process outside cq is reported (pid $outside on gpu1, 512 MiB)"
(exec 9>"$probe" && flock 9 && exec sleep 300) >/dev/null 2>&1 &
prober=$!
helpers+=("$prober")
wait_until 10 "the busy probe is reported" bash -c \
  "cq node ls --json | jq -e --arg p '$probe' '.nodes[0].busy_probes | index(\$p) != null'"
kill "$prober"
wait "$prober" 2>/dev/null || true
wait_until 10 "the probe is free again" bash -c "cq node ls --json | jq -e '.nodes[0].busy_probes == []'"
pass "a lock probe held by an outside process is reported"

# ---- VRAM cap ------------------------------------------------------------------------------
{
  echo "$outside, $uuid1, 512"
  echo "$(cat "$out/j1.pid"), $(uuid_of "$cvd1"), 2048"
  echo "$(cat "$out/j2.pid"), $(uuid_of "$cvd2"), 4096"
} >"$smi/apps.csv"
wait_until 20 "j1 is stopped over its VRAM cap" job_state_is "$j1" failed
[[ $(job_field "$j1" reason) == vram_cap ]] || fail "j1 ended with reason '$(job_field "$j1" reason)'"
[[ $(job_state_is "$j2" running && echo y) == y ]] || fail "j2 (no cap) did not keep running"
cq logs "$j1" | grep -q "^cq-node: stopped: .*VRAM" ||
  fail "j1's output has no kill line for its VRAM cap: $(cq logs "$j1")"
pass "a job over its VRAM cap (2 GiB > 1 GiB) is stopped with reason vram_cap; one without a cap runs on"
kill "$outside"
: >"$smi/apps.csv"
touch "$gate/j2"
wait_until 20 "j2 finishes" job_state_is "$j2" succeeded
wait_until 10 "the lock is released when no GPU job runs" flock -n "$lock" true
pass "the GPU lock is released after the last GPU job"

# ---- kernel fault latch ----------------------------------------------------------------------
# With a RAM cap (issue 7 item 17: its exit used to overtake the heartbeat that
# carried the fault, and the job was placed on the faulted node again and
# failed launch_failed for good).
g1=$(cq submit --name g1job --gpus 1 --ram 256M -- sh -c "$(gpu_job g1job)")
wait_until 20 "the GPU job runs" bash -c "[[ -f $out/g1job.pid ]]"
echo "[ 4242.4242] NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception: not a fault" >>"$klog"
echo "[ 4243.0001] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus." >>"$klog"
wait_until 10 "the fault is reported" bash -c "cq node ls --json | jq -e '.nodes[0].fault.xid == 79'"
[[ -f $node_dir/KERNEL-FAULT.json ]] || fail "no KERNEL-FAULT.json in the node's state dir"
jq -e '.xid == 79 and .device == "PCI:0000:3b:00"' "$node_dir/KERNEL-FAULT.json" >/dev/null ||
  fail "KERNEL-FAULT.json: $(cat "$node_dir/KERNEL-FAULT.json")"
wait_until 20 "the GPU job is stopped for the fault" bash -c \
  "cq show $g1 --json | jq -e '.allocations | any(.reason == \"fault\")'"
faulted=$(cq show "$g1" --json | jq -r '[.allocations[] | select(.reason == "fault")][0].id')
wait_until 10 "the fault's kill line is in g1's output" bash -c \
  "cq logs $g1 --allocation $faulted | grep -q '^cq-node: stopped: .*79'"
pass "Xid 79 latched the fault and stopped the running GPU job (allocation reason fault)"
g2=$(cq submit --name g2job --gpus 1 -- sh -c "$(gpu_job g2job)")
c1=$(cq submit --name cpu1 -- true)
wait_until 20 "a CPU job still runs" job_state_is "$c1" succeeded
for j in "$g1" "$g2"; do
  [[ $(job_field "$j" state) == queued ]] || fail "GPU job $j is $(job_field "$j" state), not queued"
done
cq show "$g2" --json | jq -e '.waiting | any(test("fault"))' >/dev/null ||
  fail "cq show does not name the fault: $(cq show "$g2" --json | jq -c .waiting)"
pass "while latched, GPU jobs stay queued and a CPU job runs"

stop_node
start_node
wait_until 10 "g1 is back online" node_online
hb=$(node_json | jq .last_heartbeat_ms)
wait_until 10 "two heartbeats of the restarted node" bash -c \
  "(( \$(cq node ls --json | jq '.nodes[] | select(.name == \"g1\") | .last_heartbeat_ms') > $hb + 1500 ))"
node_json | jq -e '.fault.xid == 79' >/dev/null || fail "the latch did not survive a restart"
[[ $(job_field "$g2" state) == queued ]] || fail "g2 was placed on a latched node after a restart"
pass "the latch survives a node restart"

cq node clear-fault g1 --reason "reseated the card" >/dev/null || fail "clear-fault by the Owner failed"
wait_until 10 "the fault is gone" bash -c "cq node ls --json | jq -e '.nodes[0].fault == null'"
[[ ! -f $node_dir/KERNEL-FAULT.json ]] || fail "KERNEL-FAULT.json is still there"
archived=$(ls "$node_dir"/KERNEL-FAULT.*.json 2>/dev/null | head -n 1)
[[ -n $archived ]] || fail "the fault record was not archived"
jq -e '.xid == 79 and .cleared.reason == "reseated the card" and (.cleared.by | length > 0)' \
  "$archived" >/dev/null || fail "archive: $(cat "$archived")"
pass "the Owner cleared the fault; the record is archived as $(basename "$archived") with the reason"
wait_until 20 "both GPU jobs run again" bash -c "[[ -f $out/g2job.pid ]] && [[ \$(cq show $g1 --json | jq -r .job.state) == running ]]"
touch "$gate/g1job" "$gate/g2job"
wait_until 20 "the GPU jobs finish" bash -c "[[ \$(cq show $g1 --json | jq -r .job.state) == succeeded && \$(cq show $g2 --json | jq -r .job.state) == succeeded ]]"
pass "after the clear, the queued GPU jobs ran"
