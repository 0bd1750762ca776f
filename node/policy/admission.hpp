#pragma once
// Pre-launch RAM admission (SPEC section 5, compute-queue "Per-job RAM
// admission"): node policy, pure, no I/O. The daemon samples MemAvailable
// (with the [capacity] override) right before a launch and asks this.

#include <cstdint>
#include <optional>
#include <string>

namespace cq::node {

/// A launch is allowed when `available >= start_min` and
/// `available - ram_cap >= floor`. Returns nullopt when it is, else the reason
/// in one line (naming the figures).
std::optional<std::string> ram_admission(std::uint64_t available, std::uint64_t ram_cap,
                                         std::uint64_t floor, std::uint64_t start_min);

} // namespace cq::node
