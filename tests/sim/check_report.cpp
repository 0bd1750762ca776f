// Checks a cq-sim --report file against the workload it replayed:
//
//   cq-test-sim-report REPORT WORKLOAD NODES GPUS
//
// The report parses; it has every line of the workload, each with the
// owner, priority, GPUs and CPUs the line gave; lines at one instant keep
// their order; every time is consistent (wait = start - submit >= 0,
// end >= start, completion = end - submit); the summary's counts, mean,
// p50 and p95 (nearest rank) are those of the jobs; the makespan is at least
// the last end less the first submit; the utilisations are fractions; and
// the run had the fleet's NODES nodes and GPUS GPUs. Exit 0, or 1 with what
// is wrong.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

using json = nlohmann::json;

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::cerr << "FAILED: " << what << "\n";
    ++failures;
  }
}

std::int64_t nearest_rank(std::vector<std::int64_t> v, double p) {
  std::sort(v.begin(), v.end());
  auto r = static_cast<std::size_t>(std::ceil(p * static_cast<double>(v.size())));
  return v[std::clamp<std::size_t>(r, 1, v.size()) - 1];
}

void check_stats(const json& s, const std::vector<std::int64_t>& v, const std::string& name) {
  if (v.empty()) {
    expect(s["p50"].is_null(), name + ": p50 without values");
    return;
  }
  double sum = 0;
  for (auto x : v)
    sum += static_cast<double>(x);
  expect(std::abs(s["mean"].get<double>() - sum / static_cast<double>(v.size())) <= 1,
         name + ": mean is not the jobs' mean");
  expect(s["p50"].get<std::int64_t>() == nearest_rank(v, 0.5), name + ": p50 is not the jobs'");
  expect(s["p95"].get<std::int64_t>() == nearest_rank(v, 0.95), name + ": p95 is not the jobs'");
  expect(s["p50"].get<std::int64_t>() <= s["p95"].get<std::int64_t>(), name + ": p50 > p95");
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::cerr << "usage: cq-test-sim-report REPORT WORKLOAD NODES GPUS\n";
    return 2;
  }
  std::ifstream in(argv[1]);
  auto report = json::parse(in, nullptr, false);
  if (report.is_discarded() || !report.is_object()) {
    std::cerr << "FAILED: " << argv[1] << " is not a JSON object\n";
    return 1;
  }
  std::vector<json> lines;
  std::ifstream wl(argv[2]);
  for (std::string l; std::getline(wl, l);)
    if (!l.empty())
      lines.push_back(json::parse(l));
  auto& run = report["run"];
  auto& summary = report["summary"];
  auto& jobs = report["jobs"];
  expect(run["ok"] == true, "the run did not pass its checkers");
  expect(run["nodes"] == std::stoi(argv[3]), "run.nodes is not the fleet's");
  expect(run["gpus"] == std::stoi(argv[4]), "run.gpus is not the fleet's");
  expect(jobs.is_array() && jobs.size() == lines.size(), "not every workload line is reported");
  expect(summary["jobs"] == lines.size(), "summary.jobs is not the workload's");
  std::vector<std::int64_t> waits, completions;
  std::int64_t first_submit = INT64_MAX, last_end = INT64_MIN;
  std::vector<bool> seen(lines.size());
  std::int64_t prev_submit = -1;
  int prev_line = 0;
  for (auto& j : jobs) {
    auto line = j.value("line", 0);
    auto name = "job of line " + std::to_string(line);
    if (line < 1 || static_cast<std::size_t>(line) > lines.size() || seen[line - 1]) {
      expect(false, name + ": no such line, or reported twice");
      continue;
    }
    seen[line - 1] = true;
    auto& w = lines[static_cast<std::size_t>(line - 1)];
    expect(j["owner"] == w.value("owner", ""), name + ": owner");
    expect(j["priority"] == w.value("priority", "medium"), name + ": priority");
    expect(j["gpus"] == w.value("gpus", 0), name + ": gpus");
    expect(j["cpus"] == w.value("cpus", 0), name + ": cpus");
    auto submit = j["submit_ms"].get<std::int64_t>();
    expect(submit >= w["at_ms"].get<std::int64_t>(), name + ": submitted before its instant");
    // In submission order; at one instant, in the file's order.
    expect(submit > prev_submit || (submit == prev_submit && line > prev_line),
           name + ": out of submission order");
    prev_submit = submit, prev_line = line;
    first_submit = std::min(first_submit, submit);
    if (!j["start_ms"].is_null()) {
      auto start = j["start_ms"].get<std::int64_t>();
      expect(j["wait_ms"] == start - submit && start >= submit, name + ": wait");
      expect(j["node"].is_string(), name + ": started on no node");
      waits.push_back(start - submit);
    }
    if (!j["end_ms"].is_null()) {
      auto end = j["end_ms"].get<std::int64_t>();
      expect(j["completion_ms"] == end - submit, name + ": completion");
      expect(j["start_ms"].is_null() || end >= j["start_ms"].get<std::int64_t>(),
             name + ": ends before it starts");
      completions.push_back(end - submit);
      last_end = std::max(last_end, end);
    }
  }
  expect(summary["started"] == waits.size(), "summary.started");
  expect(summary["ended"] == completions.size(), "summary.ended");
  expect(completions.size() == lines.size(), "a job never ended");
  check_stats(summary["wait_ms"], waits, "wait_ms");
  check_stats(summary["completion_ms"], completions, "completion_ms");
  expect(summary["makespan_ms"].get<std::int64_t>() >= last_end - first_submit, "makespan");
  for (auto* u : {"gpu_utilization", "cpu_utilization", "ram_utilization"})
    expect(summary[u].get<double>() >= 0 && summary[u].get<double>() <= 1,
           std::string(u) + " is not a fraction");
  expect(summary["gpu_utilization"].get<double>() > 0, "no GPU was ever used");
  if (failures)
    return 1;
  std::printf("report of %zu jobs consistent: makespan %lld ms, GPU utilisation %.3f\n",
              lines.size(), static_cast<long long>(summary["makespan_ms"].get<std::int64_t>()),
              summary["gpu_utilization"].get<double>());
  return 0;
}
