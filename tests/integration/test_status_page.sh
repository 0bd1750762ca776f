#!/usr/bin/env bash
# Issue 21, acceptance 1: headless Chromium loads the coordinator's status page
# (cq-coordinator --http) of a test cluster with jobs in every state, a hold
# and a latched GPU fault on a node with two (fake) GPU lanes:
#  - the DOM (chromium --dump-dom) shows the node, both lanes, the hold, the
#    fault and every job;
#  - the charts' ring holds points of the node and its lanes;
#  - a screenshot is saved (build/test-artifacts/status-page.png);
#  - a job that ends while the page is open changes it without a reload
#    (driven over the DevTools protocol: tests/tools/cdp_page.py).
source "$(dirname "$0")/lib.sh"
command -v chromium >/dev/null || { echo "skip: no chromium (deploy/install-deps.sh installs it)"; exit 77; }
artifacts=${CQ_TEST_ARTIFACTS:-$here/../../build/test-artifacts}
mkdir -p "$artifacts"
hp=$(free_port)
printf '[http]\nchart_interval = "1s"\n' >"$work/coordinator.toml"
start_coordinator "$CQ_URL" --http "127.0.0.1:$hp" --config "$work/coordinator.toml"
page=http://127.0.0.1:$hp/

# ---- a node with two fake GPUs, a persisted hold and a latched fault ------------------
smi=$work/smi
mkdir -p "$smi"
export FAKE_NVIDIA_SMI_DIR=$smi
cat >"$smi/gpus.csv" <<CSV
0, GPU-00000000-1111-2222-3333-444444444444, NVIDIA Fake 16GB, 16384, 1024
1, GPU-11111111-1111-2222-3333-444444444444, NVIDIA Fake 16GB, 16384, 0
CSV
: >"$smi/apps.csv"
klog=$work/kern.log
: >"$klog"
join_node g1 --mem-total 17179869184 --mem-available 17179869184 --cpus 8
node_pid=$(cat "$state/node.pid")
kill "$node_pid"
wait_until 10 "cq-node stops" gone "$node_pid"
cat >>"$state/g1/node.toml" <<TOML

[gpu]
nvidia_smi = "$(cd "$here/../fixtures" && pwd)/fake-nvidia-smi"
lock_paths = ["$work/cq-gpu.lock"]
kernel_log = "$klog"
TOML
# A hold the node kept across its restart (its own file, holds.json): lane
# gpu1 could not be confirmed clean after an earlier allocation.
hold=h-0123456789abcdef
printf '{"holds":[{"id":"%s","lane":"gpu1","allocation":"a-earlier","reason":"pid 4242 still on the GPU","at_ms":%s000,"cgroup":""}],"leftover_cgroups":[]}\n' \
  "$hold" "$(date +%s)" >"$state/g1/holds.json"
cq-node --state "$state/g1" >>"$state/node.log" 2>&1 &
echo $! >"$state/node.pid"
g1() { cq node ls --json | jq -c '.nodes[] | select(.name == "g1")'; }
wait_until 20 "g1 is back with its lanes and its hold" bash -c \
  "cq node ls --json | jq -e '.nodes[] | select(.name == \"g1\") | .online and (.lanes | length == 2) and (.holds | length == 1)'"
echo "[ 4242.4242] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus." >>"$klog"
wait_until 20 "the fault is latched" bash -c "cq node ls --json | jq -e '.nodes[] | select(.name == \"g1\") | .fault.xid == 79'"

# ---- jobs in every state ------------------------------------------------------------------
ok=$(cq submit --name ok -- true)
bad=$(cq submit --name bad -- sh -c 'exit 3')
gone=$(cq submit --name gone -- sleep 3600)
run=$(cq submit --name long -- sh -c "until [ -f $work/go ]; do sleep 0.1; done")
waits=$(cq submit --name gpu-waits --gpus 1 -- true) # the fault keeps GPU jobs queued
wait_until 30 "job $ok succeeds" job_state_is "$ok" succeeded
wait_until 30 "job $bad fails" job_state_is "$bad" failed
wait_until 30 "job $gone runs" job_state_is "$gone" running
cq cancel "$gone" >/dev/null
wait_until 30 "job $gone is cancelled" job_state_is "$gone" cancelled
wait_until 30 "job $run runs" job_state_is "$run" running
job_state_is "$waits" queued || fail "job $waits is $(job_field "$waits" state), not queued"

# ---- the DOM, as chromium --dump-dom sees it ----------------------------------------------
wait_until 10 "the snapshot has every job" bash -c \
  "curl -s ${page}api/state | jq -e '[.board.recent[].id] | length == 3'"
timeout $((60 * deadline_scale)) chromium --headless=new --no-sandbox --disable-gpu --no-first-run \
  --user-data-dir="$work/chromium" --virtual-time-budget=5000 --dump-dom "$page" \
  >"$work/dom.html" 2>"$work/chromium.log" || fail "chromium --dump-dom: $(tail -5 "$work/chromium.log")"
for id in node-g1 lane-g1-gpu0 lane-g1-gpu1 "hold-$hold" fault-g1 "job-$ok" "job-$bad" "job-$gone" \
  "job-$run" "job-$waits"; do
  grep -q "id=\"$id\"" "$work/dom.html" || fail "the page shows no #$id"
done
grep -q "data-state=\"running\"" "$work/dom.html" || fail "no running job on the page"
grep -q "exit_code 3" "$work/dom.html" || fail "the failed job's outcome is not shown"
pass "the DOM shows node g1, lanes gpu0 and gpu1, hold $hold, the fault and the 5 jobs"
charts_ok() {
  curl -s "${page}api/charts" | jq -e '(.t | length) as $n | $n >= 2 and
    ([.series["g1/mem_used_bytes", "g1/running", "g1/gpu0/vram_used_bytes"] | length] == [$n, $n, $n]) and
    (.series["g1/gpu0/vram_used_bytes"] | map(select(. != null)) | last) == 1073741824'
}
wait_until 10 "the charts have points of g1 and its lanes" charts_ok
pass "the charts hold g1's memory, running jobs and each lane's VRAM, one point a second"

# ---- a job ends while the page is open ----------------------------------------------------
python3 "$here/../tools/cdp_page.py" "$page" "$work" \
  "!!document.querySelector('#job-$run[data-state=running]')" "$work/go" \
  "!!document.querySelector('#job-$run[data-state=succeeded]')" $((60 * deadline_scale)) ||
  fail "the page did not follow job $run's end"
cp "$work/status-page.png" "$artifacts/status-page.png"
job_state_is "$run" succeeded || fail "job $run is $(job_field "$run" state)"
pass "job $run ended while the page was open: it moved to the finished list without a reload (screenshot: $artifacts/status-page.png)"
