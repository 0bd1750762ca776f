#pragma once
// cq-bench's submit figures (SPEC section 11): a real cq-coordinator in a
// temporary state dir, driven over ZeroMQ with the real codec. No node joins,
// so every submitted job stays queued and only the durable submit path is
// measured (validate, commit with fsync, acknowledge).

#include <optional>
#include <string>
#include <vector>

namespace cq::bench {

struct rate_result {
  std::string figure;
  std::vector<double> per_run;           ///< submits/s of each run
  double target = 0;                     ///< submits/s
  double ack_p50_ms = 0, ack_p99_ms = 0; ///< one-at-a-time figure only
};

/// Runs both submit figures `runs` times each; throws std::runtime_error when
/// the coordinator cannot be started.
/// With `curve`, the coordinator runs with --curve and every client speaks
/// CurveZMQ (the figure off loopback).
std::vector<rate_result> bench_submits(int runs, int submits_per_run, bool curve = false);

/// One measured value of the scale figures.
struct scale_result {
  std::string figure;
  double value = 0;
  std::string unit;
  /// SPEC section 11's bound (0: none at this size); `at_least` for rates.
  double target = 0;
  bool at_least = false;
  /// With several runs: `value` is their median, and these the spread.
  std::optional<double> min, max;
};

/// Runs' median and spread.
struct spread_of {
  double median = 0, min = 0, max = 0;
  explicit spread_of(std::vector<double> v);
  /// Figure `r` with these runs' median as its value, and their spread.
  scale_result figure(scale_result r) const {
    r.value = median, r.min = min, r.max = max;
    return r;
  }
};

/// Fills one coordinator to `jobs_small`, then `jobs_large` queued jobs and
/// measures its RSS and a whole `cq ls` process at each; then kill -9 and
/// the time until the restarted coordinator answers.
std::vector<scale_result> bench_scale(int jobs_small, int jobs_large);

/// The CLI as people use it (issue 20): `n` whole `cq submit` processes in a
/// loop against a real coordinator, `cq ls` of them, and `n` more from 50
/// loops at once (at least the one loop's rate); then the same loop
/// with task-spooler's `tsp true` (its drain and `tsp -l` too) when tsp is
/// on PATH (Debian: apt install task-spooler), side by side in one run.
std::vector<scale_result> bench_cli(int n);

/// A private `cq up` at rest: the node daemon's and the coordinator's idle
/// RSS, then `runs` jobs one at a time, each from just before a whole
/// `cq submit` starts to the moment its command ran (SPEC section 11:
/// node RSS at most 15 MB idle, submit-to-exec p50 at most 10 ms).
std::vector<scale_result> bench_local_node(int runs);

/// SPEC section 11, "complete lifecycles/s with 64 simulated nodes": a real
/// cq-coordinator over ZeroMQ and `nodes` simulated node daemons (cq-sim's
/// node model, on their own DEALER sockets, speaking the real protocol) in
/// this process. `jobs` jobs of ~zero run time are submitted pipelined; the
/// figure is jobs / (first submit .. last exit acknowledged).
scale_result bench_lifecycles(int nodes, int jobs);

} // namespace cq::bench
