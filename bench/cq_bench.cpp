// cq-bench: measures the figures of SPEC section 11 and prints a table and
// one JSON line per figure. For now: the placement pass figures.
//
//   cq-bench [--quick] [--only placement|submit|scale|lifecycle|cli|sim] [--seed N] [--stress]
//
// --stress adds figures that are not in the SPEC (worst cases of the pass).
// Inputs are built once per figure; only place() is timed.
#include "policy/placement.hpp"

#include "processes.hpp"
#include "submit_bench.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace cq::policy;
using u64 = std::uint64_t;
using i64 = std::int64_t;

constexpr u64 GiB = 1ull << 30;
constexpr i64 minute = 60'000;
constexpr i64 hour = 60 * minute;
constexpr i64 now = 1'700'000'000'000;

struct result {
  std::string figure;
  double p50 = 0, p99 = 0, min = 0, max = 0;
  int runs = 0;
  double target_p99 = 0;
  std::size_t starts = 0; ///< of the last pass, as a sanity figure
  bool reserved = false;
};

/// 64 nodes of 256 GiB and 32 CPUs, 0-8 lanes each, partly busy with live
/// allocations whose estimates end at various times.
cluster_view make_cluster(std::mt19937_64& g, int nodes) {
  auto between = [&](i64 lo, i64 hi) { return std::uniform_int_distribution<i64>(lo, hi)(g); };
  cluster_view c;
  int alloc_no = 0;
  for (int i = 0; i < nodes; ++i) {
    node_view n;
    n.name = fmt::format("node{:02}", i);
    n.approved = true;
    n.enabled = i % 29 != 28; // a couple of disabled nodes
    n.last_heartbeat_ms = now - between(0, 3000);
    n.mem_total_bytes = 256 * GiB;
    n.ram_reserve_bytes = 8 * GiB;
    n.ram_floor_bytes = i % 4 == 0 ? 4 * GiB : 0;
    n.cpus = 32;
    const int lanes = i % 3 == 0 ? 0 : static_cast<int>(between(1, 8));
    for (int l = 0; l < lanes; ++l)
      n.lanes.push_back(
          {fmt::format("gpu{}", l), 80 * GiB, l == 0 && i % 5 == 0 ? 30 * GiB : 0, false});
    // Busy: allocations filling 60-95 % of RAM, most lanes and CPUs.
    u64 ram_left = n.mem_total_bytes - n.ram_reserve_bytes;
    u64 target = ram_left * static_cast<u64>(between(60, 95)) / 100;
    u64 used = 0, cpus = 0, procs = 0;
    int lane_no = 0;
    while (used < target) {
      allocation_view a;
      a.job = fmt::format("running{}", alloc_no++);
      a.node = n.name;
      a.priority = static_cast<level>(between(0, 2));
      a.checkpoint = between(0, 3) == 0;
      a.ram_bytes = std::min<u64>(static_cast<u64>(between(4, 64)) * GiB, target - used);
      a.ram_used_bytes = a.ram_bytes * static_cast<u64>(between(30, 100)) / 100;
      a.ram_floor_bytes = between(0, 9) == 0 ? 2 * GiB : 0;
      a.cpus = cpus + 4 <= n.cpus ? static_cast<u64>(between(1, 4)) : 0;
      if (lane_no < lanes && between(0, 2) != 0)
        a.lanes.push_back(fmt::format("gpu{}", lane_no++));
      if (!a.lanes.empty())
        a.vram_bytes = static_cast<u64>(between(8, 40)) * GiB;
      a.est_end_ms = now + between(-10 * minute, 12 * hour);
      used += a.ram_bytes;
      cpus += a.cpus;
      procs += a.ram_used_bytes;
      c.allocations.push_back(std::move(a));
    }
    n.mem_available_bytes = n.mem_total_bytes - procs - 4 * GiB;
    c.nodes.push_back(std::move(n));
  }
  return c;
}

/// A backlogged queue in serving order: mostly jobs that do not fit now
/// (bigger than any free block, or close to the largest so every node is
/// looked at), GPU jobs waiting for lanes, some small jobs that fit, a few
/// pinned, some with floors or start minimums.
std::vector<job_view> make_queue(std::mt19937_64& g, std::size_t jobs, int nodes) {
  auto between = [&](i64 lo, i64 hi) { return std::uniform_int_distribution<i64>(lo, hi)(g); };
  std::vector<job_view> q;
  q.reserve(jobs);
  for (std::size_t i = 0; i < jobs; ++i) {
    job_view j;
    j.id = fmt::format("job{}", i);
    auto r = between(0, 99);
    j.priority = r < 10 ? level::high : r < 80 ? level::medium : level::low;
    auto kind = between(0, 99);
    if (kind < 40) { // does not fit now: more RAM than any node has free
      j.ram_bytes = static_cast<u64>(between(96, 240)) * GiB;
      j.cpus = static_cast<u64>(between(4, 16));
    } else if (kind < 70) { // within the largest free block but short of CPUs or RAM on most
                            // nodes: every node is looked at, few fit
      j.ram_bytes = static_cast<u64>(between(4, 90)) * GiB;
      j.cpus = static_cast<u64>(between(12, 32));
    } else if (kind < 85) { // GPU job, mostly waiting for lanes
      j.ram_bytes = static_cast<u64>(between(8, 64)) * GiB;
      j.gpus = static_cast<u64>(between(1, 8));
      j.vram_bytes = static_cast<u64>(between(8, 80)) * GiB;
      j.cpus = static_cast<u64>(between(1, 8));
    } else { // small: some of these fit
      j.ram_bytes = static_cast<u64>(between(1, 16)) * GiB;
      j.cpus = static_cast<u64>(between(0, 4));
    }
    if (between(0, 9) == 0)
      j.ram_floor_bytes = 8 * GiB;
    if (between(0, 49) == 0)
      j.ram_start_min_bytes = 32 * GiB;
    j.est_ms = between(minute, 24 * hour);
    if (between(0, 19) == 0)
      j.pinned_node = fmt::format("node{:02}", between(0, nodes - 1));
    q.push_back(std::move(j));
  }
  std::stable_sort(q.begin(), q.end(),
                   [](const job_view& a, const job_view& b) { return a.priority < b.priority; });
  return q;
}

/// Stress (not a SPEC figure): a queue in which no job can ever run (each
/// needs more CPUs than any node has), so no reservation is ever made.
std::vector<job_view> make_hopeless_queue(std::size_t jobs) {
  std::vector<job_view> q(jobs);
  for (std::size_t i = 0; i < jobs; ++i) {
    q[i].id = fmt::format("job{}", i);
    q[i].ram_bytes = 8 * GiB;
    q[i].cpus = 64;
    q[i].est_ms = hour;
  }
  return q;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  if (v.empty())
    return 0;
  // nearest rank
  auto rank =
      static_cast<std::size_t>(std::max(1.0, std::ceil(p / 100.0 * static_cast<double>(v.size()))));
  return v[std::min(rank, v.size()) - 1];
}

result bench_placement(const std::string& figure, std::size_t jobs, int nodes, int runs,
                       double target, std::uint64_t seed, bool hopeless = false) {
  std::mt19937_64 g(seed);
  const auto cluster = make_cluster(g, nodes);
  const auto jobs_held = hopeless ? make_hopeless_queue(jobs) : make_queue(g, jobs, nodes);
  // The scheduler hands a pass its queue as pointers to the views it keeps.
  std::vector<const job_view*> held;
  for (auto& j : jobs_held)
    held.push_back(&j);
  const queue_ref queue = held;
  result r;
  r.figure = figure;
  r.runs = runs;
  r.target_p99 = target;
  std::vector<double> ms;
  ms.reserve(static_cast<std::size_t>(runs));
  // One warm-up pass, untimed.
  auto warm = place(cluster, queue, now);
  r.starts = warm.starts.size();
  r.reserved = warm.reserved.has_value();
  for (int i = 0; i < runs; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    auto p = place(cluster, queue, now);
    auto t1 = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    if (p.starts.size() != r.starts)
      std::fprintf(stderr, "cq-bench: place() is not deterministic\n");
  }
  r.p50 = percentile(ms, 50);
  r.p99 = percentile(ms, 99);
  r.min = *std::min_element(ms.begin(), ms.end());
  r.max = *std::max_element(ms.begin(), ms.end());
  return r;
}

/// The disk's own bound on one client's durable submits: the median time of
/// a 4 KiB write and fdatasync in a directory beside the bench's stores
/// (/tmp). A submit acknowledged one at a time waits for at least one; 0 if
/// the file cannot be made.
double sync_floor_ms() {
  char tmpl[] = "/tmp/cq-bench-sync-XXXXXX";
  if (!::mkdtemp(tmpl))
    return 0;
  auto file = std::filesystem::path(tmpl) / "probe";
  int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  std::vector<double> ms;
  if (fd >= 0) {
    char block[4096] = {};
    for (int i = 0; i < 200; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      if (::pwrite(fd, block, sizeof block, (i % 16) * 4096) != sizeof block ||
          ::fdatasync(fd) != 0)
        break;
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    ::close(fd);
  }
  std::error_code ec;
  std::filesystem::remove_all(tmpl, ec);
  if (ms.empty())
    return 0;
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

/// The durable submit figures: median of the runs, with the spread.
int print_submits(bool quick, bool curve) {
  std::vector<cq::bench::rate_result> rs;
  try {
    rs = cq::bench::bench_submits(quick ? 1 : 3, quick ? 500 : 2000, curve);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cq-bench: %s\n", e.what());
    return 1;
  }
  fmt::print("# durable submits to a real cq-coordinator over loopback{} (fresh store per run)\n",
             curve ? ", CurveZMQ on" : ", plain");
  fmt::print("{:<60} {:>10} {:>10} {:>10} {:>12} {:>5}\n", "figure", "median/s", "min/s", "max/s",
             "target", "runs");
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  for (auto& r : rs) {
    auto m = median(r.per_run);
    auto [lo, hi] = std::minmax_element(r.per_run.begin(), r.per_run.end());
    fmt::print("{:<60} {:>10.0f} {:>10.0f} {:>10.0f} {:>9} {:>2} {:>5}\n", r.figure, m, *lo, *hi,
               fmt::format(">= {}", r.target), m >= r.target ? "ok" : "!!", r.per_run.size());
  }
  fmt::print("{:<60} p50 {:.3f} ms, p99 {:.3f} ms (store nearly empty)\n",
             curve ? "submit ack latency, one at a time, CurveZMQ"
                   : "submit acknowledgement latency, one at a time",
             rs[0].ack_p50_ms, rs[0].ack_p99_ms);
  if (!curve && rs.size() > 1)
    fmt::print("{:<60} p50 {:.3f} ms, p99 {:.3f} ms (store nearly empty)\n",
               "submit acknowledgement latency, one at a time, local socket", rs[1].ack_p50_ms,
               rs[1].ack_p99_ms);
  // What the disk allows one client at most (SPEC section 10: FULL sync, so
  // every acknowledged submit waited for at least one fdatasync).
  double floor = curve ? 0 : sync_floor_ms();
  if (floor > 0)
    fmt::print("{:<60} {:.3f} ms: one client one at a time at most {:.0f}/s\n",
               "4 KiB write + fdatasync on this disk, median of 200", floor, 1000 / floor);
  for (auto& r : rs) {
    auto [lo, hi] = std::minmax_element(r.per_run.begin(), r.per_run.end());
    fmt::print("{{\"figure\": \"{}\", \"median_per_s\": {:.0f}, \"min_per_s\": {:.0f}, "
               "\"max_per_s\": {:.0f}, \"runs\": {}, \"target_per_s\": {}}}\n",
               r.figure, median(r.per_run), *lo, *hi, r.per_run.size(), r.target);
  }
  fmt::print("{{\"figure\": \"submit acknowledgement latency{}\", \"p50_ms\": {:.3f}, "
             "\"p99_ms\": {:.3f}}}\n",
             curve ? ", CurveZMQ" : "", rs[0].ack_p50_ms, rs[0].ack_p99_ms);
  if (floor > 0)
    fmt::print("{{\"figure\": \"4 KiB write and fdatasync on the stores' disk\", "
               "\"median_ms\": {:.3f}, \"one_client_max_per_s\": {:.0f}}}\n",
               floor, 1000 / floor);
  return 0;
}

/// One figure of a single value, with its bound when it has one.
void print_scale_line(const cq::bench::scale_result& r) {
  if (r.unit.empty()) { // a remark, not a figure
    fmt::print("{}\n", r.figure);
    return;
  }
  auto spread = r.min && r.max ? fmt::format(" [{:.1f}-{:.1f}]", *r.min, *r.max) : std::string();
  // Sub-millisecond figures (latencies) with two decimals: a bound of 0.5 ms
  // is not judged on a value shown as 0.5.
  int digits = r.unit == "ms" && r.value < 10 ? 2 : 1;
  if (r.target == 0) {
    fmt::print("{:<70} {:>10.{}f} {}{}\n", r.figure, r.value, digits, r.unit, spread);
    return;
  }
  bool ok = r.at_least ? r.value >= r.target : r.value <= r.target;
  fmt::print("{:<70} {:>10.{}f} {}{} ({} {:.1f}) {}\n", r.figure, r.value, digits, r.unit, spread,
             r.at_least ? ">=" : "<=", r.target, ok ? "ok" : "!!");
}

void print_scale_json(const cq::bench::scale_result& r) {
  fmt::print("{{\"figure\": \"{}\", \"value\": {:.2f}, \"unit\": \"{}\"", r.figure, r.value,
             r.unit);
  if (r.target != 0)
    fmt::print(", \"{}\": {}", r.at_least ? "target_at_least" : "target_at_most", r.target);
  if (r.min && r.max)
    fmt::print(", \"min\": {:.2f}, \"max\": {:.2f}", *r.min, *r.max);
  fmt::print("}}\n");
}

/// A group of single-value figures under `header`: the table, then the JSON
/// lines (remarks have none); 1 when `measure` failed.
template <class F>
int print_group(const char* header, F measure) {
  std::vector<cq::bench::scale_result> rs;
  try {
    rs = measure();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cq-bench: %s\n", e.what());
    return 1;
  }
  fmt::print("# {}\n", header);
  for (auto& r : rs)
    print_scale_line(r);
  for (auto& r : rs)
    if (!r.unit.empty())
      print_scale_json(r);
  return 0;
}

/// cq-sim --study with 64 nodes and `jobs` jobs of its built-in GPU cluster
/// workload: simulated hours per wall second (SPEC section 11: 100).
std::vector<cq::bench::scale_result> bench_study(int jobs) {
  auto cmd =
      fmt::format("{}/cq-sim --study --seed 1 --nodes 64 --jobs {} --no-self-check 2>&1",
                  std::filesystem::read_symlink("/proc/self/exe").parent_path().string(), jobs);
  // Three runs: one run on a shared VM moves by a fifth either way.
  std::vector<double> rates;
  for (int run = 0; run < 3; ++run) {
    std::unique_ptr<FILE, int (*)(FILE*)> p(::popen(cmd.c_str(), "r"), ::pclose);
    if (!p)
      throw std::runtime_error("cannot run cq-sim");
    std::string out;
    char buf[4096];
    while (auto n = std::fread(buf, 1, sizeof buf, p.get()))
      out.append(buf, n);
    // "simulated S s in W s wall (H simulated hours per wall hour, R per wall second)"
    auto at = out.find(" per wall second)");
    auto from = at == std::string::npos ? at : out.rfind(", ", at);
    if (from == std::string::npos)
      throw std::runtime_error("cq-sim printed no rate:\n" + out.substr(0, 2000));
    rates.push_back(std::strtod(out.c_str() + from + 2, nullptr));
  }
  std::sort(rates.begin(), rates.end());
  cq::bench::scale_result r{
      fmt::format("cq-sim --study, 64 nodes, {} jobs: simulated hours per wall "
                  "second (median of 3)",
                  jobs),
      rates[1], "h/s", 100.0, true};
  r.min = rates.front(), r.max = rates.back();
  return {r};
}

/// Memory, `cq ls` and restart time with many queued jobs.
int print_scale(bool quick) {
  return print_group(
      "scale: one coordinator filled by 8 pipelined clients (no node: all queued)",
      [&] { return cq::bench::bench_scale(quick ? 2000 : 10000, quick ? 20000 : 100000); });
}

/// The CLI loop, side by side with task-spooler when it is installed.
int print_cli(bool quick) {
  int rc = print_group("the CLI: whole processes in a loop, as a shell runs them",
                       [&] { return cq::bench::bench_cli(quick ? 200 : 1000); });
  if (rc != 0)
    return rc;
  return print_group("a local node at rest: idle memory, submit-to-exec, cq run",
                     [&] { return cq::bench::bench_local_node(quick ? 10 : 30); });
}

int usage() {
  std::fprintf(stderr, "usage: cq-bench [--quick] [--only "
                       "placement|submit|scale|lifecycle|cli|sim] [--seed N] [--stress]\n");
  return 2;
}

} // namespace

int main(int argc, char** argv) {
  cq::bench::end_daemons_on_signals();
  bool quick = false, stress = false;
  std::string only;
  std::uint64_t seed = 42;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if (a == "--stress") {
      stress = true;
    } else if (a == "--only" && i + 1 < argc) {
      only = argv[++i];
    } else if (a == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else {
      return usage();
    }
  }
  if (!only.empty() && only != "placement" && only != "submit" && only != "scale" &&
      only != "lifecycle" && only != "cli" && only != "sim") {
    std::fprintf(stderr,
                 "cq-bench: unknown figure group '%s' (known: placement, submit, scale, "
                 "lifecycle, cli, sim)\n",
                 only.c_str());
    return 2;
  }
  if (only.empty() || only == "sim") {
    int rc = print_group("cq-sim: a scheduling study on virtual time",
                         [&] { return bench_study(quick ? 2000 : 10000); });
    if (rc != 0 || only == "sim")
      return rc;
  }
  if (only.empty() || only == "cli") {
    int rc = print_cli(quick);
    if (rc != 0 || only == "cli")
      return rc;
  }
  if (only.empty() || only == "scale") {
    int rc = print_scale(quick);
    if (rc != 0 || only == "scale")
      return rc;
  }
  if (only.empty() || only == "lifecycle") {
    try {
      auto r = cq::bench::bench_lifecycles(64, quick ? 2000 : 10000);
      print_scale_line(r);
      print_scale_json(r);
      // The sweep (issue 20, after Flux's): lifecycles/s should hold flat as
      // the queue grows. Each size on a fresh coordinator, three times in
      // turn (one run moves by a tenth on a noisy machine): the median, and
      // the spread.
      if (!quick) {
        const int sizes[] = {2000, 4000, 8000, 16000};
        std::vector<std::vector<cq::bench::scale_result>> runs(std::size(sizes));
        for (int round = 0; round < 3; ++round)
          for (std::size_t i = 0; i < std::size(sizes); ++i)
            runs[i].push_back(cq::bench::bench_lifecycles(64, sizes[i]));
        std::vector<cq::bench::scale_result> sweep;
        for (auto& r : runs) {
          std::sort(r.begin(), r.end(), [](auto& a, auto& b) { return a.value < b.value; });
          auto s = r[1];
          s.figure += " (median of 3)";
          s.target = 0; // the figure above carries the target
          s.min = r.front().value, s.max = r.back().value;
          print_scale_line(s);
          sweep.push_back(s);
        }
        for (auto& s : sweep)
          print_scale_json(s);
        auto [lo, hi] = std::minmax_element(sweep.begin(), sweep.end(),
                                            [](auto& a, auto& b) { return a.value < b.value; });
        fmt::print("{:<70} {:>10.2f} (flat: 1.0)\n",
                   "sweep 2k..16k jobs: slowest / fastest lifecycles/s", lo->value / hi->value);
      }
    } catch (const std::exception& e) {
      fmt::print(stderr, "cq-bench: {}\n", e.what());
      return 1;
    }
    if (only == "lifecycle")
      return 0;
  }
  if (only.empty() || only == "submit") {
    int rc = print_submits(quick, false);
    if (rc == 0)
      rc = print_submits(quick, true); // the same path with CurveZMQ on (off loopback)
    if (rc != 0 || only == "submit")
      return rc;
  }

  std::vector<result> results;
  results.push_back(bench_placement("one full placement pass, 10k queued jobs x 64 nodes", 10'000,
                                    64, quick ? 8 : 30, 1, seed));
  results.push_back(bench_placement("one full placement pass, 100k queued jobs x 64 nodes", 100'000,
                                    64, quick ? 4 : 15, 10, seed + 1));
  if (stress)
    results.push_back(bench_placement("stress: placement pass, 100k jobs that never fit x 64 nodes",
                                      100'000, 64, quick ? 2 : 5, 10, seed + 2, true));

  // The machine is shared and noisy (SPEC section 11): say how busy it was.
  if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
    double load = 0;
    if (std::fscanf(f, "%lf", &load) == 1)
      fmt::print("# placement pass only (inputs built once, place() timed); load average {:.2f}\n",
                 load);
    std::fclose(f);
  }
  fmt::print("{:<60} {:>9} {:>9} {:>9} {:>9} {:>10} {:>5}\n", "figure", "p50 ms", "p99 ms",
             "min ms", "max ms", "target p99", "runs");
  for (const auto& r : results)
    fmt::print("{:<60} {:>9.3f} {:>9.3f} {:>9.3f} {:>9.3f} {:>7} {:>2} {:>5}\n", r.figure, r.p50,
               r.p99, r.min, r.max, fmt::format("<= {}", r.target_p99),
               r.p99 <= r.target_p99 ? "ok" : "!!", r.runs);
  for (const auto& r : results)
    fmt::print("{{\"figure\": \"{}\", \"p50_ms\": {:.3f}, \"p99_ms\": {:.3f}, \"min_ms\": {:.3f}, "
               "\"max_ms\": {:.3f}, "
               "\"runs\": {}, \"target_p99_ms\": {}, \"starts\": {}, \"reserved\": {}}}\n",
               r.figure, r.p50, r.p99, r.min, r.max, r.runs, r.target_p99, r.starts,
               r.reserved ? "true" : "false");
  return 0;
}
