#pragma once
// fmt formatting of the protocol's enums: by their wire names (to_string).
#include "cq/bus/protocol.hpp"

#include <fmt/format.h>

template <>
struct fmt::formatter<cq::bus::job_state> : fmt::formatter<std::string_view> {
  auto format(cq::bus::job_state s, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(to_string(s), ctx);
  }
};

template <>
struct fmt::formatter<cq::bus::reason> : fmt::formatter<std::string_view> {
  auto format(cq::bus::reason r, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(to_string(r), ctx);
  }
};

template <>
struct fmt::formatter<cq::bus::alloc_state> : fmt::formatter<std::string_view> {
  auto format(cq::bus::alloc_state s, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(to_string(s), ctx);
  }
};
