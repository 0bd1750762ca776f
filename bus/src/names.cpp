// The names of the wire's enumerations (schema.hpp): job and allocation
// states and end reasons, as the wire, the store and `--json` spell them.
#include "cq/bus/schema.hpp"

#include <cstddef>
#include <string_view>

namespace cq::bus {

namespace {
constexpr std::string_view job_state_names[] = {"queued",    "starting", "running",  "stopping",
                                                "succeeded", "failed",   "cancelled"};
constexpr std::string_view alloc_state_names[] = {"starting", "running", "stopping", "finished",
                                                  "unknown"};
constexpr std::string_view reason_names[] = {
    "",         "cancelled", "launch_failed",     "timeout",  "oom",
    "vram_cap", "fault",     "checkpointed",      "refused",  "lost",
    "signal",   "exit_code", "dependency_failed", "preempted"};

template <class E, std::size_t N>
bool parse_name(std::string_view name, const std::string_view (&names)[N], E& out) {
  for (std::size_t i = 0; i < N; ++i)
    if (names[i] == name) {
      out = static_cast<E>(i);
      return true;
    }
  return false;
}
} // namespace

std::string_view to_string(job_state s) {
  return job_state_names[static_cast<std::size_t>(s)];
}
std::string_view to_string(alloc_state s) {
  return alloc_state_names[static_cast<std::size_t>(s)];
}
bool parse(std::string_view name, job_state& out) {
  return parse_name(name, job_state_names, out);
}
bool parse(std::string_view name, alloc_state& out) {
  return parse_name(name, alloc_state_names, out);
}
std::string_view to_string(reason r) {
  return reason_names[static_cast<std::size_t>(r)];
}
bool parse(std::string_view name, reason& out) {
  return parse_name(name, reason_names, out);
}

} // namespace cq::bus
