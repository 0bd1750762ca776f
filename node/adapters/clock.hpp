#pragma once
// The GPU adapter's clock reads (the node actors use the actor clock). Everything
// else takes times as arguments, so that a test or cq-sim can drive it.

#include <chrono>
#include <cstdint>

namespace cq::node {

/// Milliseconds since the Unix epoch (wall clock: for records and reports).
inline std::int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

/// Milliseconds on a monotonic clock (for timers and durations; never goes back).
inline std::int64_t mono_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

} // namespace cq::node
