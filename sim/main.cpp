// cq-sim: the real coordinator and simulated nodes on virtual time, one seed
// at a time or as a swarm (see world.hpp).
//
//   cq-sim --seed 1 --nodes 8 --jobs 2000 --faults all
//   cq-sim --swarm 1000 [--seed FIRST]
//   cq-sim --seed 7 --defect ignore_fault_latch     (a checker's teeth)
#include "adapters/memory.hpp"
#include "world.hpp"

#include "cq/help_format.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>

using namespace cq::sim;

namespace {

double wall_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::int64_t pct(std::vector<std::int64_t> v, double p) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(p * static_cast<double>(v.size() - 1))];
}

void print_failure(const result& r) {
  fmt::print("FAILED: {}: {}\n", r.violation, r.message);
  if (!r.story.empty()) {
    fmt::print("the story of {}:\n", fmt::join(r.subjects, ", "));
    for (auto& l : r.story)
      fmt::print("  {}\n", l);
  }
  if (!r.tail.empty()) {
    fmt::print("trace tail:\n");
    for (auto& l : r.tail)
      fmt::print("  {}\n", l);
  }
}

void print_report(const result& r) {
  fmt::print("simulated {:.1f} s in {:.2f} s wall ({:.0f} simulated hours per wall hour, {:.1f} "
             "per wall second), {} actor runs\n",
             static_cast<double>(r.sim_ms) / 1000, r.wall_s,
             r.wall_s > 0 ? static_cast<double>(r.sim_ms) / 1000 / r.wall_s : 0.0,
             r.wall_s > 0 ? static_cast<double>(r.sim_ms) / 3.6e6 / r.wall_s : 0.0, r.steps);
  fmt::print("jobs: {} generated, {} acknowledged ({} after retries of a lost reply with the "
             "same job id), {} never acknowledged\n",
             r.jobs_generated, r.jobs_acked, r.submit_retries, r.jobs_unknown);
  std::string out;
  for (auto& [s, n] : r.outcomes)
    out += fmt::format(" {} {}", s, n);
  fmt::print("outcomes:{}\n", out);
  static const char* names[] = {"high", "medium", "low"};
  for (auto& [l, s] : r.levels)
    fmt::print("wait {:<6}: p50 {:.1f} s, p95 {:.1f} s ({} jobs)\n", names[l],
               static_cast<double>(pct(s.waits_ms, 0.5)) / 1000,
               static_cast<double>(pct(s.waits_ms, 0.95)) / 1000, s.waits_ms.size());
  fmt::print("utilization: RAM {:.0f}%, CPUs {:.0f}%, GPUs {:.0f}%; backfilled starts {}, yields "
             "{}\n",
             100 * r.ram_util, 100 * r.cpu_util, 100 * r.gpu_util, r.backfilled, r.yields);
  std::string changes;
  for (auto& [m, n] : r.transitions)
    changes += fmt::format(" {} {}", m, n);
  fmt::print("state changes:{}\n", changes.empty() ? " none" : changes);
  fmt::print("every node idle {:.1f} s after the last job ended\n",
             static_cast<double>(r.idle_after_ms) / 1000);
  fmt::print("node loss: {} allocations lost after lost-after, {} starts beside a given-away "
             "attempt still running on its cut-off node\n",
             r.lost, r.overlaps_after_loss);
  // Over time: at most 12 rows, each the mean of its minutes.
  if (!r.series.empty()) {
    auto per = (r.series.size() + 11) / 12;
    fmt::print("{:>10} {:>5} {:>5} {:>5}\n", "from (s)", "RAM", "CPUs", "GPUs");
    for (std::size_t i = 0; i < r.series.size(); i += per) {
      double ram = 0, cpu = 0, gpu = 0;
      std::size_t n = 0;
      for (std::size_t j = i; j < r.series.size() && j < i + per; ++j, ++n)
        ram += r.series[j].ram, cpu += r.series[j].cpu, gpu += r.series[j].gpu;
      fmt::print("{:>10} {:>4.0f}% {:>4.0f}% {:>4.0f}%\n", r.series[i].t_ms / 1000,
                 100 * ram / static_cast<double>(n), 100 * cpu / static_cast<double>(n),
                 100 * gpu / static_cast<double>(n));
    }
  }
  std::string faults;
  for (auto& [k, n] : r.faults)
    faults += fmt::format(" {} {}", k, n);
  fmt::print("faults injected:{}\n", faults.empty() ? " none" : faults);
}

fault_mix parse_faults(const std::string& s, const char* flag) {
  if (s == "all")
    return fault_mix::all();
  if (s == "none")
    return fault_mix::none();
  fault_mix f;
  std::size_t pos = 0;
  while (pos <= s.size()) {
    auto end = s.find(',', pos);
    auto k = s.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    pos = end == std::string::npos ? s.size() + 1 : end + 1;
    if (k == "drop")
      f.drop = 0.01;
    else if (k == "dup")
      f.dup = 0.01;
    else if (k == "reorder")
      f.reorder = true;
    else if (k == "partitions")
      f.partitions = true;
    else if (k == "reconnects")
      f.reconnects = true;
    else if (k == "node_crashes")
      f.node_crashes = true;
    else if (k == "coordinator_crashes")
      f.coordinator_crashes = true;
    else if (k == "commit_failures")
      f.commit_fail = 0.002;
    else if (k == "child_crashes")
      f.child_crashes = true;
    else if (k == "gpu_faults")
      f.gpu_faults = true;
    else if (k == "ignore_term")
      f.ignore_term = true;
    else if (k == "escapees")
      f.escapees = true;
    else if (k == "ooms")
      f.ooms = true;
    else if (k == "machine_crashes")
      f.machine_crashes = true;
    else if (k == "anywhere")
      f.anywhere = true;
    else if (k == "power_loss")
      f.power_loss = true;
    else if (k == "commit_crashes")
      f.commit_crashes = true;
    else if (k == "clock_skew")
      f.clock_skew = true;
    else if (k == "disk_faults")
      f.disk_faults = true;
    else
      throw CLI::ValidationError(flag, "unknown fault kind '" + k + "'");
  }
  return f;
}

} // namespace

int main(int argc, char** argv) {
  cq::coord::prefault_new_memory(); // docs/adr/0051
  CLI::App app{"cq-sim: the real coordinator and simulated nodes on virtual time"};
  cq::use_help_format(app);
  options opt;
  std::string faults = "all";
  std::string without;
  fault_mix mask;
  int swarm = 0;
  bool no_self_check = false;
  std::string expect;
  app.add_option("--seed", opt.seed, "the seed (first seed of a swarm)");
  app.add_option("--nodes", opt.nodes, "simulated nodes")->check(CLI::Range(1, 1024));
  app.add_option("--jobs", opt.jobs, "jobs the workload submits")->check(CLI::Range(0, 1000000));
  app.add_option(
      "--faults", faults,
      "all, none, or a comma-separated list of: drop dup reorder partitions reconnects "
      "node_crashes coordinator_crashes commit_failures child_crashes gpu_faults ignore_term "
      "escapees ooms machine_crashes anywhere power_loss commit_crashes clock_skew disk_faults");
  app.add_option("--without", without,
                 "fault kinds never injected, even when a swarm draws them (a list as for "
                 "--faults)");
  app.add_option("--swarm", swarm, "run this many seeds, each with a fault mix drawn from it")
      ->check(CLI::Range(1, 10000000));
  app.add_option("--defect", opt.defects, "a deliberate coordinator defect (tests the checkers)");
  app.add_option("--workload", opt.workload_file, "JSON lines, one job per line");
  app.add_option("--fleet", opt.fleet_file,
                 "nodes from a file (JSON lines or a JSON array; docs/operations.md) instead "
                 "of --nodes drawn ones")
      ->excludes(app.get_option("--nodes"));
  app.add_option("--report", opt.report_file,
                 "write the per-job report and its summary (wait, completion time, makespan, "
                 "GPU utilisation) to this file, as JSON");
  bool faults_given = false;
  app.add_flag("--study", opt.study,
               "a scheduling study: no faults, production leases, heartbeats every --heartbeat, "
               "and (without --workload) a GPU cluster's workload over weeks");
  app.add_option("--history-jobs", opt.history_jobs,
                 "the coordinator keeps at most this many finished jobs ([retention] "
                 "history_jobs): the bound's passes, and the nodes' removals they order, "
                 "run during the run")
      ->check(CLI::Range(std::uint64_t(1), std::uint64_t(1'000'000'000)));
  app.add_option("--heartbeat", opt.heartbeat_ms,
                 "with --study: the nodes' heartbeat interval in simulated ms (default 1 h)")
      ->check(CLI::Range(std::int64_t(1000), std::int64_t(24) * 3'600'000));
  app.add_option("--tail", opt.tail, "trace lines shown with a failure");
  app.add_flag("--verbose", opt.verbose, "print the whole trace");
  app.add_flag("--no-self-check", no_self_check, "do not run a single seed twice");
  app.add_option("--expect", expect,
                 "swarm: succeed at the first seed this checker fails, fail if none does (a "
                 "checker's deliberate-defect test)");
  CLI11_PARSE(app, argc, argv);
  opt.wall_clock = wall_now;
  if (swarm && !opt.report_file.empty()) {
    fmt::print(stderr, "cq-sim: --report: one seed at a time, not with --swarm\n");
    return 2;
  }
  faults_given = app.count("--faults") > 0;
  if (opt.heartbeat_ms && !opt.study) {
    fmt::print(stderr, "cq-sim: --heartbeat: only with --study\n");
    return 2;
  }
  if (opt.study) {
    if (swarm || !opt.defects.empty() || (faults_given && faults != "none")) {
      fmt::print(stderr, "cq-sim: --study: runs one seed without faults or defects\n");
      return 2;
    }
    faults = "none";
  }
  for (auto& d : opt.defects) {
    auto names = defect_names();
    if (std::find(names.begin(), names.end(), d) == names.end()) {
      fmt::print(stderr, "cq-sim: --defect: unknown '{}'; one of {}\n", d, fmt::join(names, ", "));
      return 2;
    }
  }
  try {
    opt.faults = parse_faults(faults, "--faults");
    if (!without.empty()) {
      mask = parse_faults(without, "--without");
      opt.faults.remove(mask);
    }
  } catch (const CLI::Error& e) {
    fmt::print(stderr, "cq-sim: {}\n", e.what());
    return 2;
  }

  if (swarm) {
    auto t0 = wall_now();
    int failed = 0;
    std::uint64_t first = opt.seed;
    std::map<std::string, int> faults; // injected over the swarm, by kind
    int self_checked = 0;              // seeds run twice (determinism)
    for (int i = 0; i < swarm; ++i) {
      auto o = opt;
      o.seed = first + static_cast<std::uint64_t>(i);
      std::mt19937_64 g(o.seed ^ 0x9e3779b97f4a7c15ull);
      o.faults = fault_mix::random(g);
      o.faults.remove(mask);
      auto w0 = wall_now();
      auto r = run(o);
      r.wall_s = wall_now() - w0;
      for (auto& [k, n] : r.faults)
        faults[k] += n;
      // The determinism self-check on a sample of the swarm's seeds (every
      // 50th, and the first): the same seed must give the same trace.
      if (r.ok && !no_self_check && expect.empty() && i % 50 == 0) {
        auto again = run(o);
        ++self_checked;
        if (again.trace_hash != r.trace_hash) {
          r.ok = false;
          r.violation = "determinism";
          r.message = fmt::format("the same seed gave trace hash {:016x}, then {:016x}",
                                  r.trace_hash, again.trace_hash);
        }
      }
      // Progress for long swarms: a line every 1,000 seeds.
      if ((i + 1) % 1000 == 0 && i + 1 < swarm) {
        auto spent = wall_now() - t0;
        fmt::print("... {} of {} seeds, {} failed so far, {:.0f} seeds per minute\n", i + 1, swarm,
                   failed + (r.ok ? 0 : 1), spent > 0 ? (i + 1) / spent * 60 : 0.0);
        std::fflush(stdout);
      }
      if (!r.ok) {
        ++failed;
        fmt::print("seed {} [{}] FAILED: {}: {}\n  reproduce: cq-sim --swarm 1 --seed {} --nodes "
                   "{} --jobs {}{}{}{}\n",
                   o.seed, o.faults.describe(), r.violation, r.message, o.seed, o.nodes, o.jobs,
                   without.empty() ? "" : " --without " + without,
                   o.defects.empty()
                       ? ""
                       : " --defect " + fmt::format("{}", fmt::join(o.defects, " --defect ")),
                   o.history_jobs ? fmt::format(" --history-jobs {}", o.history_jobs) : "");
        if (!expect.empty() && r.violation == expect) {
          print_failure(r);
          fmt::print("{} found it after {} seeds\n", expect, i + 1);
          return 0;
        }
        if (failed == 1 && expect.empty())
          print_failure(r);
      }
    }
    if (!expect.empty()) {
      fmt::print("FAILED: checker {} found nothing in {} seeds\n", expect, swarm);
      return 1;
    }
    auto wall = wall_now() - t0;
    std::string kinds;
    for (auto& [k, n] : faults)
      kinds += fmt::format(" {} {}", k, n);
    fmt::print("faults injected:{}\n", kinds.empty() ? " none" : kinds);
    fmt::print("swarm: {} seeds from {}, {} failed, {} run twice with the same trace, {:.1f} s "
               "wall ({:.0f} seeds per minute)\n",
               swarm, first, failed, self_checked, wall, wall > 0 ? swarm / wall * 60 : 0.0);
    return failed ? 1 : 0;
  }

  auto w0 = wall_now();
  auto r = run(opt);
  r.wall_s = wall_now() - w0;
  if (r.violation == "input") {
    fmt::print(stderr, "cq-sim: error: {}\n", r.message);
    return 2;
  }
  fmt::print("{}", r.parameters);
  if (!r.ok) {
    print_failure(r);
    std::string inputs;
    if (opt.study)
      inputs += opt.heartbeat_ms ? fmt::format(" --study --heartbeat {}", opt.heartbeat_ms)
                                 : std::string(" --study");
    inputs += opt.fleet_file.empty() ? fmt::format(" --nodes {}", opt.nodes)
                                     : " --fleet " + opt.fleet_file;
    inputs += opt.workload_file.empty() ? fmt::format(" --jobs {}", opt.jobs)
                                        : " --workload " + opt.workload_file;
    if (opt.history_jobs)
      inputs += fmt::format(" --history-jobs {}", opt.history_jobs);
    fmt::print("reproduce: cq-sim --seed {}{} --faults {}{}\n", opt.seed, inputs, faults,
               opt.defects.empty()
                   ? ""
                   : " --defect " + fmt::format("{}", fmt::join(opt.defects, " --defect ")));
    return 1;
  }
  print_report(r);
  if (!no_self_check) {
    auto again = run(opt);
    if (again.trace_hash != r.trace_hash || !again.ok) {
      fmt::print("FAILED: determinism: the same seed gave trace hash {:016x}, then {:016x}\n",
                 r.trace_hash, again.trace_hash);
      return 1;
    }
  }
  fmt::print("trace hash {:016x}{}; every checker green, every accepted job terminal\n",
             r.trace_hash, no_self_check ? "" : " (twice)");
  return 0;
}
