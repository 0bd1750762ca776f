// The placement vocabulary that is not the pass (placement.hpp): levels and
// a node's heartbeat freshness.
#include "placement.hpp"

namespace cq::policy {

std::optional<level> parse_level(std::string_view s) {
  if (s == "high")
    return level::high;
  if (s == "medium")
    return level::medium;
  if (s == "low")
    return level::low;
  return std::nullopt;
}

bool heartbeat_fresh(std::int64_t last_heartbeat_ms, std::int64_t fresh_ms, std::int64_t now_ms) {
  return last_heartbeat_ms > 0 && now_ms - last_heartbeat_ms <= fresh_ms;
}

std::string_view to_string(level l) {
  switch (l) {
  case level::high:
    return "high";
  case level::medium:
    return "medium";
  case level::low:
    return "low";
  }
  return "medium";
}

} // namespace cq::policy
