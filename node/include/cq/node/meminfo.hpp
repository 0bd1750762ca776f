#pragma once
// Host memory figures for the heartbeat and for pre-launch RAM admission: the
// vocabulary and the pure parsers of /proc/meminfo and /proc/<pid>/stat text.
// Reading them is the adapters' (node/adapters/linux/procfs.hpp).

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cq::node {

struct mem_info {
  std::uint64_t total_bytes = 0;     ///< MemTotal
  std::uint64_t available_bytes = 0; ///< MemAvailable
};

/// Parses the text of /proc/meminfo. Returns nullopt when MemTotal or
/// MemAvailable is missing or malformed.
std::optional<mem_info> parse_meminfo(std::string_view text);

/// The figures the node reports: `measured` with the configured overrides
/// applied (see config.hpp, [capacity]). An overridden total or available
/// replaces the measured one; with only the total overridden, the measured
/// MemAvailable is clamped to it. nullopt when something is neither measured
/// nor overridden.
std::optional<mem_info> apply_capacity(std::optional<mem_info> measured,
                                       std::optional<std::uint64_t> total_override,
                                       std::optional<std::uint64_t> available_override);

/// Parses the text of /proc/<pid>/stat: the process group (field 5) and the
/// resident set in pages (field 24). nullopt when malformed.
struct proc_stat {
  pid_t pgrp = 0;
  std::uint64_t rss_pages = 0;
};
std::optional<proc_stat> parse_proc_stat(std::string_view text);

} // namespace cq::node
