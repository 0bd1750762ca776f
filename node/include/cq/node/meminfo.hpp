#pragma once
// Host memory figures for the heartbeat and for pre-launch RAM admission, from
// /proc/meminfo; per-process-group RSS from /proc/<pid>/stat.

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <span>
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

/// Reads and parses /proc/meminfo; nullopt when it cannot (not Linux, say).
std::optional<mem_info> read_meminfo();

/// The figures the node reports: `measured` with the configured overrides
/// applied (see config.hpp, [capacity]). An overridden total or available
/// replaces the measured one; with only the total overridden, the measured
/// MemAvailable is clamped to it. nullopt when something is neither measured
/// nor overridden.
std::optional<mem_info> apply_capacity(std::optional<mem_info> measured,
                                       std::optional<std::uint64_t> total_override,
                                       std::optional<std::uint64_t> available_override);

/// Number of CPUs this process may use (at least 1).
std::uint64_t cpu_count();

/// Parses the text of /proc/<pid>/stat: the process group (field 5) and the
/// resident set in pages (field 24). nullopt when malformed.
struct proc_stat {
  pid_t pgrp = 0;
  std::uint64_t rss_pages = 0;
};
std::optional<proc_stat> parse_proc_stat(std::string_view text);

/// One process group to measure: its id, and where the sum goes.
struct group_rss {
  pid_t pgid = 0;
  std::uint64_t rss_bytes = 0; ///< out: sum of RSS over the group's processes
};

/// Scans /proc once and sums the RSS of every process whose process group is
/// one of `groups` (each entry's rss_bytes is set; 0 when none was found).
/// Costs one small read per process on the machine; no allocation.
void sample_group_rss(std::span<group_rss> groups);

} // namespace cq::node
