#pragma once
// Host memory figures for the heartbeat, from /proc/meminfo.

#include <cstdint>
#include <optional>
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

/// Number of CPUs this process may use (at least 1).
std::uint64_t cpu_count();

} // namespace cq::node
