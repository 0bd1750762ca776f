// What differs between a submit and the job its --job-id already names.
#include "commands.hpp"

#include <fmt/format.h>

#include <string>
#include <vector>

namespace cq::cli {

std::string spec_differences(const bus::job_spec& sent, const bus::job_info& stored) {
  // What the job keeps of its spec, by the flag that set it (the
  // environment is stored apart and not shown; a priority may have been
  // moved since, so it is not compared).
  std::vector<std::string> differ;
  auto check = [&](bool same, const char* flag) {
    if (!same)
      differ.push_back(flag);
  };
  check(sent.argv == stored.argv, "the command");
  check(sent.cwd == stored.cwd, "--cwd");
  check(sent.name.empty() || stored.array_index || sent.name == stored.name, "--name");
  check(sent.ram_bytes == stored.ram_bytes, "--ram");
  check(sent.node == stored.pinned_node, "--node");
  check(sent.gpus.value_or(0) == stored.gpus, "--gpus");
  check(sent.vram_bytes == stored.vram_bytes, "--vram");
  check(sent.cpus.value_or(0) == stored.cpus, "--cpus");
  check(sent.est_ms == stored.est_ms, "--est");
  check(sent.timeout_ms == stored.timeout_ms, "--timeout");
  check(!sent.profile || *sent.profile == stored.profile, "--profile");
  check(sent.output.value_or("") == stored.output, "--output");
  check(sent.preempt.value_or("never") == stored.preempt, "--preempt");
  check(sent.retry_oom.value_or(0) == stored.retry_oom, "--retry-oom");
  check(sent.no_requeue.value_or(false) == stored.no_requeue, "--no-requeue");
  check(!sent.lease_ms || *sent.lease_ms == stored.lease_ms, "--lease");
  check(!sent.lost_after_ms || *sent.lost_after_ms == stored.lost_after_ms, "--lost-after");
  check(sent.ram_floor_bytes.value_or(0) == stored.ram_floor_bytes, "--ram-floor");
  check(sent.ram_start_min_bytes.value_or(0) == stored.ram_start_min_bytes, "--ram-start-min");
  if (differ.empty())
    return "nothing cq keeps of the job differs, so most likely the environment does, or "
           "--after, --priority or --hold-for-node: cq submit sends the whole environment, and a "
           "retry with --job-id must send the same one; a $(...) with a redirection in bash runs "
           "one SHLVL deeper";
  std::string list;
  for (std::size_t i = 0; i < differ.size(); ++i)
    list += (i == 0 ? "" : i + 1 == differ.size() ? " and " : ", ") + differ[i];
  return fmt::format("{} differ{}", list, differ.size() == 1 ? "s" : "");
}

} // namespace cq::cli
