#!/usr/bin/env bash
# cq-node doctor (issue 18): on this machine it reports the cgroup version the
# kernel mounts, kernel-enforced memory caps, no GPUs (nvidia-smi absent) and
# passes both self-tests (a job over a 32 MiB cap is killed; a child that
# left its session is found and killed), leaving no process and no cgroup;
# with a fake nvidia-smi it finds its two GPUs; its human output fits 80
# columns and says what to do. With --platform posix (CQ_NODE_PLATFORM) it
# reports the watchdog instead, and the self-tests pass under it.
source "$(dirname "$0")/lib.sh"
needs_root "memory cgroups for the self-tests"
fake_smi=$(cd "$here/../fixtures" && pwd)/fake-nvidia-smi
node_dir=$work/node
mkdir -p "$node_dir"
printf '[gpu]\nnvidia_smi = "%s"\n' "$work/no-nvidia-smi-here" >"$node_dir/node.toml"

case $(stat -fc %T /sys/fs/cgroup) in
cgroup2fs) want_cgroups=cgroup_v2 ;;
*) if [[ -d /sys/fs/cgroup/memory ]]; then want_cgroups=cgroup_v1; else want_cgroups=none; fi ;;
esac

out=$work/doctor.json
cq-node doctor --json --state "$node_dir" >"$out" 2>"$work/doctor.err" ||
  { cat "$out" "$work/doctor.err"; fail "cq-node doctor failed on this machine"; }
check() { jq -e "$1" "$out" >/dev/null || { cat "$out"; fail "$2"; }; }
check '.ok == true' "doctor says not ok"
check ".cgroups == \"$want_cgroups\"" "cgroups is not $want_cgroups"
check ".platform == \"$(node_platform)\"" "the platform is not $(node_platform)"
if [[ $(node_platform) == posix ]]; then
  check '.memory_cap_mode == "watchdog"' "posix: caps are not the watchdog's"
  check '.checks[] | select(.check == "memory_caps") | .value | startswith("watchdog")' \
    "memory_caps does not say watchdog"
else
  check '.memory_cap_mode == "cgroup_v1" or .memory_cap_mode == "cgroup_v2"' \
    "caps are not kernel-enforced"
  check '.checks[] | select(.check == "memory_caps") | .value | startswith("kernel-enforced")' \
    "memory_caps does not say kernel-enforced"
fi
check '.gpus == 0' "GPUs found without nvidia-smi"
check '.checks[] | select(.check == "self_test_oom") | .ok' "the OOM self-test failed"
check '.checks[] | select(.check == "self_test_cleanup") | .ok' "the cleanup self-test failed"
pass "doctor: $(jq -r '.cgroups + ", " + .memory_cap_mode' "$out"); $(jq -r '.checks[] | select(.check == "self_test_oom") | .value' "$out")"

# It ends what it started: no test job, no group.
for p in /proc/[0-9]*; do
  if grep -qaF "CQ_DOCTOR=1" "$p/environ" 2>/dev/null; then
    fail "a self-test process is left: ${p#/proc/}"
  fi
done
left=$(find /sys/fs/cgroup -maxdepth 3 -type d -name 'cq-doctor-*' 2>/dev/null | head -3)
[[ -z $left ]] || fail "self-test groups are left: $left"
pass "no self-test process or cgroup is left"

# The fake nvidia-smi's two GPUs.
smi=$work/smi
mkdir -p "$smi"
printf '%s\n' "0, GPU-00000000-1111-2222-3333-444444444444, NVIDIA Fake 16GB, 16384, 0" \
  "1, GPU-11111111-1111-2222-3333-444444444444, NVIDIA Fake 16GB, 16384, 0" >"$smi/gpus.csv"
printf '[gpu]\nnvidia_smi = "%s"\n' "$fake_smi" >"$node_dir/node.toml"
FAKE_NVIDIA_SMI_DIR=$smi cq-node doctor --json --no-self-tests --state "$node_dir" >"$out" ||
  { cat "$out"; fail "doctor with two fake GPUs failed"; }
check '.gpus == 2' "the two fake GPUs are not found"
check '[.checks[] | select(.check == "self_test_oom")] | length == 0' "--no-self-tests ran them"
pass "doctor finds the fake nvidia-smi's two GPUs"

# For people: 80 columns, a verdict, advice where something is missing.
FAKE_NVIDIA_SMI_DIR=$smi cq-node doctor --no-self-tests --state "$node_dir" >"$work/doctor.txt" ||
  { cat "$work/doctor.txt"; fail "doctor (text) failed"; }
awk 'length > 80 { print; bad = 1 } END { exit bad }' "$work/doctor.txt" ||
  fail "doctor's output is wider than 80 columns"
grep -q "All checks passed." "$work/doctor.txt" || fail "no verdict: $(cat "$work/doctor.txt")"
grep -q -- "-> cq-node install CODE NAME" "$work/doctor.txt" ||
  fail "no advice for a machine not joined yet"
pass "doctor's text fits 80 columns and says what to do"
cat "$work/doctor.txt"
