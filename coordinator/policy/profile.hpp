#pragma once
// Sizing jobs from measurements of earlier runs (SPEC section 4: effective RAM
// and estimate). Pure functions.

#include <cstdint>
#include <string>
#include <vector>

namespace cq::policy {

/// Margin added on top of the percentile of measured peaks and wall times.
inline constexpr double profile_margin = 1.25;

struct profile_estimate {
  std::uint64_t ram_bytes = 0; ///< 0 = no measurement yet
  std::uint64_t est_ms = 0;    ///< 0 = no measurement yet
};

/// The 95th percentile of RAM peaks times the margin, rounded up to 64 MiB
/// (at least 64 MiB), and the 90th percentile of wall times times the margin
/// (at least 1 s). Empty inputs give 0.
profile_estimate estimate(const std::vector<std::uint64_t>& peak_ram_bytes,
                          const std::vector<std::uint64_t>& wall_ms);

/// The default profile key of a command: its argv joined by spaces, cut to
/// 200 bytes (with a hash of the whole when cut, so long commands stay apart).
std::string default_profile_key(const std::vector<std::string>& argv);

} // namespace cq::policy
