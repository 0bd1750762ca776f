#include "node/policy/exit_reason.hpp"

#include <fmt/format.h>

namespace cq::node {

bus::reason exit_reason(const exit_facts& f) {
  using bus::reason;
  auto r = reason::none;
  if (f.oom)
    r = reason::oom;
  else if (f.exit_code && *f.exit_code == 6 && f.yield_ordered)
    r = reason::checkpointed;
  else if (f.timed_out)
    r = reason::timeout;
  else if (f.stop_requested)
    r = reason::cancelled;
  if ((r == reason::none || r == reason::cancelled) && f.gpu_stop != reason::none)
    r = f.gpu_stop;
  if (r == reason::none && f.lost)
    r = reason::lost;
  return r;
}

namespace {

std::string mib(std::uint64_t bytes) {
  auto m = static_cast<double>(bytes) / (1024.0 * 1024.0);
  return m == static_cast<double>(static_cast<std::uint64_t>(m))
             ? fmt::format("{} MiB", static_cast<std::uint64_t>(m))
             : fmt::format("{:.1f} MiB", m);
}

std::string secs(std::int64_t ms) {
  return ms % 1000 == 0 ? fmt::format("{}s", ms / 1000)
                        : fmt::format("{:.1f}s", static_cast<double>(ms) / 1000.0);
}

} // namespace

std::optional<std::string> kill_line(const kill_facts& f) {
  using bus::reason;
  std::string text;
  switch (f.reason) {
  case reason::oom: {
    auto cap = f.ram_cap ? mib(*f.ram_cap) : std::string("its RAM cap");
    if (f.watchdog)
      text = fmt::format("killed: out of memory: its processes used {}, over its RAM cap of {} "
                         "(sampled by the node's watchdog, which can overshoot between samples)",
                         f.peak ? mib(*f.peak) : std::string("more"), cap);
    else
      text = fmt::format("killed: out of memory: it reached its RAM cap of {} (the kernel's "
                         "memory cgroup){}",
                         cap, f.peak ? fmt::format("; peak {}", mib(*f.peak)) : "");
    text += "; give it more with --ram";
    break;
  }
  case reason::timeout:
    text = fmt::format("stopped: its --timeout of {} ran out after {} (SIGTERM, then SIGKILL {} "
                       "later if it was still running)",
                       f.timeout_ms ? secs(*f.timeout_ms) : std::string("?"),
                       secs(static_cast<std::int64_t>(f.wall_ms)), secs(f.term_kill_after_ms));
    break;
  case reason::cancelled:
    text = f.yield_ordered
               ? "stopped: preempted: it was asked to yield at its lease boundary and did not "
                 "exit 6 within the grace"
               : "stopped by the coordinator: cancelled (cq cancel), or this attempt was given "
                 "up (cq show says which)";
    break;
  case reason::fault:
  case reason::vram_cap:
    text = fmt::format("stopped: {}", f.gpu_detail.empty()
                                          ? (f.reason == reason::fault
                                                 ? std::string("a fault latched on its GPU lane")
                                                 : std::string("it went over its --vram cap"))
                                          : f.gpu_detail);
    break;
  default:
    return std::nullopt;
  }
  return fmt::format("cq-node: {}\n", text);
}

} // namespace cq::node
