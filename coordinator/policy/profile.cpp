#include "profile.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>

namespace cq::policy {
namespace {

std::uint64_t percentile(std::vector<std::uint64_t> v, double p) {
  std::sort(v.begin(), v.end());
  auto idx = static_cast<std::size_t>(std::ceil(p * static_cast<double>(v.size()))) - 1;
  return v[std::min(idx, v.size() - 1)];
}

} // namespace

profile_estimate estimate(const std::vector<std::uint64_t>& ram,
                          const std::vector<std::uint64_t>& wall) {
  profile_estimate out;
  constexpr std::uint64_t step = 64ull << 20;
  if (!ram.empty()) {
    auto r = static_cast<double>(percentile(ram, 0.95)) * profile_margin;
    auto bytes = static_cast<std::uint64_t>(std::ceil(r / static_cast<double>(step))) * step;
    out.ram_bytes = std::max(bytes, step);
  }
  if (!wall.empty()) {
    auto w = static_cast<double>(percentile(wall, 0.90)) * profile_margin;
    out.est_ms = std::max<std::uint64_t>(static_cast<std::uint64_t>(std::ceil(w)), 1000);
  }
  return out;
}

std::string default_profile_key(const std::vector<std::string>& argv) {
  std::string key;
  for (auto& a : argv) {
    if (!key.empty())
      key += ' ';
    key += a;
  }
  if (key.size() <= 200)
    return key;
  auto h = std::hash<std::string>{}(key);
  return fmt::format("{}…#{:016x}", key.substr(0, 180), h);
}

} // namespace cq::policy
