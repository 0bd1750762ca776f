#include "node/policy/admission.hpp"

#include <fmt/format.h>

#include <climits>

namespace cq::node {

namespace {

/// "1234 bytes (1.2 GiB)", for admission messages.
std::string bytes_text(std::uint64_t b) {
  return fmt::format("{} bytes ({:.2f} GiB)", b, static_cast<double>(b) / (1ull << 30));
}

} // namespace

std::optional<std::string> ram_admission(std::uint64_t available, std::uint64_t ram_cap,
                                         std::uint64_t floor, std::uint64_t start_min) {
  if (available < start_min)
    return fmt::format("MemAvailable {} is below ram_start_min_bytes {}", bytes_text(available),
                       bytes_text(start_min));
  if (ram_cap > UINT64_MAX - floor)
    return fmt::format("invalid constraints: RAM cap {} plus ram_floor_bytes {} overflows", ram_cap,
                       floor);
  if (available < ram_cap + floor)
    return fmt::format("MemAvailable {} minus the RAM cap {} is below ram_floor_bytes {}",
                       bytes_text(available), bytes_text(ram_cap), bytes_text(floor));
  return std::nullopt;
}

} // namespace cq::node
