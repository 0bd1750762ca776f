#!/usr/bin/env python3
# A GPU cluster's weeks as a cq-sim workload (JSON lines), for measuring
# cq-sim --study (docs/operations.md, "Scheduling studies"):
#
#   tests/sim/gpu_trace.py JOBS [SEED] > trace.jsonl
#   cq-sim --study --seed 1 --nodes 64 --workload trace.jsonl --no-self-check
#
# Synthetic, shaped like published GPU cluster traces: log-normal run times
# (median 40 min, a minute to a week), 0-8 GPUs, estimates, twelve owners,
# sweeps at one instant, arrivals spread to offer the 132 GPUs of
# `cq-sim --seed 1 --nodes 64` about 60% of what they can run. RAM caps of
# 2-12 GiB and 1-8 CPUs fit every node that seed draws.
import json, math, random, sys
n = int(sys.argv[1]); random.seed(int(sys.argv[2]) if len(sys.argv) > 2 else 1)
jobs = []
for k in range(n):
    g = random.choices([0, 1, 2, 4, 8], [10, 55, 15, 12, 8])[0]
    run = int(min(max(2.4e6 * math.exp(1.5 * random.gauss(0, 1)), 6e4), 6.048e8))
    j = {"priority": random.choices(["high", "medium", "low"], [10, 75, 15])[0],
         "ram_bytes": random.randint(2, 12) << 30, "run_ms": run,
         "owner": "user%02d" % random.randint(1, 12), "cpus": random.randint(1, 8)}
    if g: j["gpus"] = g
    if random.random() < 0.7: j["est_ms"] = int(math.ceil(run * math.exp(0.3 + 0.6 * random.gauss(0, 1)) / 9e5) * 9e5)
    if random.random() < 0.07: j["exit"] = 1
    jobs.append(j)
work = sum(j.get("gpus", 0) * j["run_ms"] for j in jobs)
span = work / (132 * 0.6)
k = 0
while k < n:
    t = 60000 + int(random.random() * span)
    for _ in range(random.randint(2, 20) if random.random() < 0.2 else 1):
        if k < n: jobs[k]["at_ms"] = t; k += 1
jobs.sort(key=lambda j: j["at_ms"])
for j in jobs: print(json.dumps(j))
