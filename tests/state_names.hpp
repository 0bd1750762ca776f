#pragma once
// Tests compare states with their wire names ("queued"), as a reader of
// `cq show --json` would; production code compares the enums.
#include "cq/bus/protocol.hpp"

#include <string_view>

namespace cq::bus {
inline bool operator==(job_state s, std::string_view name) {
  return to_string(s) == name;
}
inline bool operator==(alloc_state s, std::string_view name) {
  return to_string(s) == name;
}
inline bool operator==(reason r, std::string_view name) {
  return to_string(r) == name;
}
} // namespace cq::bus
