// SPEC section 11's two figures of a local node at rest: the node daemon's
// idle RSS and the submit-to-exec latency (submit_bench.hpp:
// bench_local_node). bench/submit_to_exec.sh measures the same from a shell.
// Beside them, a trivial job's whole life as `cq run` waits for it, with
// task-spooler's `tsp -f` in turns.
#include "processes.hpp"
#include "submit_bench.hpp"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <thread>

namespace cq::bench {

namespace {
using clock_type = std::chrono::steady_clock;

/// The wall clock in ns: a file's mtime is on it.
std::int64_t wall_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_REALTIME, &t);
  return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}
/// A trivial job's whole life as a person waits for it: `cq run -q --
/// true`, whole process, on the idle node, `runs` times 0.2 s apart (people
/// do not type faster), in turns with task-spooler's `tsp -f true` (which
/// waits for its job too) when it is installed.
void run_true(local_up& up, int runs, std::vector<scale_result>& out) {
  auto tsp = find_tsp();
  std::optional<tsp_server> ts;
  if (!tsp.empty())
    ts.emplace(tsp, 100);
  std::vector<double> cq_ms, tsp_ms;
  for (int i = 0; i < runs; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    cq_ms.push_back(time_process({up.bin, "run", "-q", "--", "true"}, up.env));
    if (ts)
      tsp_ms.push_back(time_process({ts->bin, "-f", "true"}, ts->env));
  }
  out.push_back(spread_of(cq_ms).figure(
      {fmt::format("cq run -q -- true, whole process, idle local node (p50 of {}{})", runs,
                   ts ? ", in turns with tsp -f true" : ""),
       0, "ms"}));
  if (ts)
    out.push_back(spread_of(tsp_ms).figure(
        {fmt::format("task-spooler: tsp -f true, whole process (p50 of {})", runs), 0, "ms"}));
}

} // namespace

std::vector<scale_result> bench_local_node(int runs) {
  local_up up;
  // The daemons settle (the node's first probes, the coordinator's first
  // heartbeat handled) before their memory is read.
  auto deadline = clock_type::now() + std::chrono::seconds(2);
  while (clock_type::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::vector<scale_result> out;
  auto node_kb = rss_kb(up.pid_of("node"));
  auto coord_kb = rss_kb(up.pid_of("coordinator"));
  if (node_kb < 0 || coord_kb < 0)
    throw std::runtime_error("cannot read the local daemons' RSS");
  out.push_back({"node daemon RSS, idle", static_cast<double>(node_kb) / 1024.0, "MB", 15.0});
  out.push_back(
      {"coordinator RSS, idle (local, no jobs)", static_cast<double>(coord_kb) / 1024.0, "MB"});
  // From just before `cq submit` starts to the moment the job's one command
  // ran: `date +%s%N` prints the wall clock (a file's mtime would be the
  // kernel's coarse clock, a tick behind), read back with `cq logs`. One job
  // at a time, each after the last one finished. The job's own clock gives
  // the figure, so the wait for its end looks only every 20 ms, and first
  // after that long: a poll a millisecond, each a request the coordinator
  // serves while it places the job, made the node no longer idle (the p50
  // was 2-6 ms higher with it).
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    auto t0 = wall_ns();
    auto id = output_of({up.bin, "submit", "-q", "--", "/bin/date", "+%s%N"}, up.env);
    while (!id.empty() && (id.back() == '\n' || id.back() == ' '))
      id.pop_back();
    auto until = clock_type::now() + std::chrono::seconds(30);
    do {
      if (clock_type::now() > until)
        throw std::runtime_error("a submitted job did not end within 30 s");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    } while (up.live_jobs() > 0);
    auto printed = output_of({up.bin, "logs", id}, up.env);
    auto ran = std::strtoll(printed.c_str(), nullptr, 10);
    if (ran <= 0)
      throw std::runtime_error(fmt::format("job {} printed no time: '{}'", id, printed));
    ms.push_back(static_cast<double>(ran - t0) / 1e6);
  }
  out.push_back(spread_of(ms).figure({fmt::format("submit-to-exec latency p50, idle local node ({} "
                                                  "jobs, one at a time, whole cq submit)",
                                                  runs),
                                      0, "ms", 10.0}));
  out.push_back({fmt::format("submit-to-exec latency p99, idle local node ({} jobs)", runs),
                 percentile(ms, 99), "ms"});
  run_true(up, runs, out);
  return out;
}

} // namespace cq::bench
